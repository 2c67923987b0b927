"""Hugging Face architectures from small configs with random weights (no download):
factories for `tools/compile.py test/python/hf_models.py:NAME`."""
import torch
import transformers as T

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

def llama():
    torch.manual_seed(0)
    c = T.LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    return Logits(T.LlamaForCausalLM(c).eval()), _ids(128)
