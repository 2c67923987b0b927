"""Real architectures with random weights (nothing is downloaded): Hugging Face
BERT / GPT-2 / LLaMA / the T5 encoder from small configs, and a torchvision-style ResNet.
Factories for `tools/compile.py test/python/real_models.py:NAME`."""
import torch
import torch.nn.functional as F
import transformers as T
from torch import nn

class LastHidden(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, ids): return self.model(input_ids=ids).last_hidden_state

class Logits(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, ids): return self.model(input_ids=ids).logits

def _ids(vocab):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, vocab, (2, 16), generator=g),)

def bert():
    torch.manual_seed(0)
    c = T.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    return LastHidden(T.BertModel(c).eval()), _ids(128)

def gpt2():
    torch.manual_seed(0)
    c = T.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0)
    return Logits(T.GPT2LMHeadModel(c).eval()), _ids(128)

def t5_encoder():
    """Its attention adds a relative position bias: a bucket of (key - query)
    looked up in an embedding table, which fusion puts inside the scores' epilogue."""
    torch.manual_seed(0)
    c = T.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    return LastHidden(T.T5EncoderModel(c).eval()), _ids(128)

def llama():
    torch.manual_seed(0)
    c = T.LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    return Logits(T.LlamaForCausalLM(c).eval()), _ids(128)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))

class ResNetTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.fc = nn.Linear(64, 10)
    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

def resnet():
    torch.manual_seed(0)
    m = ResNetTiny()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.normal_(0, 0.1); mod.running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(2, 3, 64, 64),)
