"""Real architectures with random weights (nothing is downloaded): Hugging Face
BERT / GPT-2 / LLaMA / the T5 encoder / ViT / Whisper's encoder / Mistral (sliding
window) / Mixtral (top-k mixture of experts) from small configs, each called the way
its documentation shows, and torchvision-style CNNs written in plain torch (ResNet,
MobileNetV3-small, EfficientNet, ConvNeXt).
Factories for `tools/compile.py test/python/real_models.py:NAME[?f64=1]`."""
import torch
import torch.nn.functional as F
import transformers as T
from torch import nn
from transformers.models.whisper.modeling_whisper import WhisperEncoder

class LastHidden(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, ids): return self.model(input_ids=ids).last_hidden_state

class Logits(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, ids): return self.model(input_ids=ids).logits

class PixelsLastHidden(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, pixels): return self.model(pixel_values=pixels).last_hidden_state

class FeaturesLastHidden(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, features): return self.model(input_features=features).last_hidden_state

def _dtype(f64):
    return torch.float64 if f64 else torch.float32

def _ids(vocab):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, vocab, (2, 16), generator=g),)

def bert(positions=64):
    torch.manual_seed(0)
    c = T.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=positions)
    return LastHidden(T.BertModel(c).eval()), _ids(128)

def gpt2():
    torch.manual_seed(0)
    c = T.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0)
    return Logits(T.GPT2LMHeadModel(c).eval()), _ids(128)

class PaddedLastHidden(torch.nn.Module):
    def __init__(self, model): super().__init__(); self.model = model
    def forward(self, ids, mask): return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

def llama_padded(seq=256):
    """A LLaMA called with an attention mask (a padded batch): Hugging Face
    builds its causal mask and the padding as one condition per score, a
    comparison of the indices and a gather from the (batch, keys) mask."""
    torch.manual_seed(0)
    c = T.LlamaConfig(vocab_size=128, hidden_size=256, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=512, max_position_embeddings=seq)
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[1, :seq // 4] = 0  # left padding
    return PaddedLastHidden(T.LlamaModel(c).eval()), (torch.randint(0, 128, (2, seq), generator=g), mask)

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


def vit(f64=0):
    """Patch embedding as a strided conv, a [CLS] token and learned position
    embeddings, pre-LayerNorm encoder layers."""
    torch.manual_seed(0)
    c = T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8)
    dtype = _dtype(f64)
    return PixelsLastHidden(T.ViTModel(c, add_pooling_layer=False).eval().to(dtype)), (torch.randn(2, 3, 32, 32, dtype=dtype),)

def whisper_encoder(f64=0):
    """Two 1-D convs over the log-mel frames (the second strided), GELU,
    sinusoidal position embeddings, pre-LayerNorm encoder layers. The frames
    must number 2 * max_source_positions."""
    torch.manual_seed(0)
    c = T.WhisperConfig(d_model=32, num_mel_bins=16, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64, max_source_positions=16)
    dtype = _dtype(f64)
    encoder = WhisperEncoder(c).eval().to(dtype)
    return FeaturesLastHidden(encoder), (torch.randn(2, 16, 32, dtype=dtype),)

def mistral():
    """LLaMA's layers with sliding-window attention: the window (8) is shorter
    than the sequence (16), so the causal mask also cuts off keys too far back."""
    torch.manual_seed(0)
    c = T.MistralConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                        max_position_embeddings=64, sliding_window=8)
    return Logits(T.MistralForCausalLM(c).eval()), _ids(128)

def mixtral(batched_mm=0):
    """A sparse mixture of experts in every layer: a softmax router, top-2 of 4
    experts per token (torch.topk). transformers' default experts implementation,
    grouped_mm, sorts the (token, expert) pairs by expert (argsort, histc, cumsum
    for the group offsets) and, in float32, calls its own opaque custom op
    (transformers::grouped_mm_fallback) for the grouped matmuls. batched_mm=1
    picks the experts implementation made of aten ops only: each pair's expert
    weights gathered by index, two bmm, the top-k outputs summed back per token."""
    torch.manual_seed(0)
    c = T.MixtralConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                        max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2)
    model = T.MixtralForCausalLM(c).eval()
    if batched_mm:
        model.set_experts_implementation("batched_mm")
    return Logits(model), _ids(128)


def _random_batchnorm_stats(m):
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.normal_(0, 0.1); mod.running_var.uniform_(0.5, 1.5)
    return m

def _conv_bn(cin, cout, k, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))

class SqueezeExcite(nn.Module):
    """torchvision.ops.SqueezeExcitation: average pool, 1x1 conv down, activation,
    1x1 conv up, a sigmoid-like gate scaling each channel."""
    def __init__(self, channels, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1); self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.act = act(); self.gate = gate()
    def forward(self, x):
        s = self.gate(self.fc2(self.act(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return x * s

class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1x1 expand, depthwise kxk, optional SE (hardsigmoid
    gate), 1x1 project; a residual when the shape is kept."""
    def __init__(self, cin, hidden, cout, k, stride, se, act):
        super().__init__()
        self.expand = None if hidden == cin else _conv_bn(cin, hidden, 1, act=act)
        self.dw = _conv_bn(hidden, hidden, k, stride, groups=hidden, act=act)
        self.se = SqueezeExcite(hidden, max(8, hidden // 4), nn.ReLU, nn.Hardsigmoid) if se else nn.Identity()
        self.project = _conv_bn(hidden, cout, 1)
        self.residual = stride == 1 and cin == cout
    def forward(self, x):
        y = x if self.expand is None else self.expand(x)
        y = self.project(self.se(self.dw(y)))
        return x + y if self.residual else y

class MobileNetV3Tiny(nn.Module):
    """mobilenet_v3_small's shape, shortened: a hardswish stem, three inverted
    residuals (ReLU then hardswish, 3x3 and 5x5, with and without SE), a 1x1
    conv, pool, and a hardswish classifier."""
    def __init__(self):
        super().__init__()
        self.stem = _conv_bn(3, 16, 3, 2, act=nn.Hardswish)
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 16, 3, 2, True, nn.ReLU),
            InvertedResidual(16, 72, 24, 3, 2, False, nn.ReLU),
            InvertedResidual(24, 96, 24, 5, 1, True, nn.Hardswish))
        self.head = _conv_bn(24, 96, 1, act=nn.Hardswish)
        self.classifier = nn.Sequential(nn.Linear(96, 128), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(128, 10))
    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

def mobilenet_v3():
    torch.manual_seed(0)
    return _random_batchnorm_stats(MobileNetV3Tiny().eval()), (torch.randn(2, 3, 32, 32),)

class MBConv(nn.Module):
    """EfficientNet's block: 1x1 expand (SiLU), depthwise kxk (SiLU), SE (SiLU,
    sigmoid gate) squeezing to a quarter of the block's input, 1x1 project; a
    residual (stochastic depth is the identity in eval) when the shape is kept."""
    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.expand = None if expand == 1 else _conv_bn(cin, hidden, 1, act=nn.SiLU)
        self.dw = _conv_bn(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU)
        self.se = SqueezeExcite(hidden, max(1, cin // 4), nn.SiLU, nn.Sigmoid)
        self.project = _conv_bn(hidden, cout, 1)
        self.residual = stride == 1 and cin == cout
    def forward(self, x):
        y = x if self.expand is None else self.expand(x)
        y = self.project(self.se(self.dw(y)))
        return x + y if self.residual else y

class EfficientNetTiny(nn.Module):
    """efficientnet_b0's shape, shortened: a SiLU stem, MBConv1 3x3, MBConv6 3x3
    strided, MBConv6 5x5 with a residual, a 1x1 head, pool, classifier."""
    def __init__(self):
        super().__init__()
        self.stem = _conv_bn(3, 16, 3, 2, act=nn.SiLU)
        self.blocks = nn.Sequential(MBConv(16, 16, 3, 1, 1), MBConv(16, 24, 3, 2, 6), MBConv(24, 24, 5, 1, 6))
        self.head = _conv_bn(24, 64, 1, act=nn.SiLU)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, 10))
    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

def efficientnet():
    torch.manual_seed(0)
    return _random_batchnorm_stats(EfficientNetTiny().eval()), (torch.randn(2, 3, 32, 32),)

class LayerNorm2d(nn.LayerNorm):
    """torchvision's: a LayerNorm over the channels of an NCHW tensor."""
    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)

class CNBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7 conv, to NHWC, LayerNorm, Linear 4x, GELU,
    Linear back, to NCHW, times a per-channel layer scale, plus the input."""
    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim); self.fc2 = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y))))
        return x + self.layer_scale * y.permute(0, 3, 1, 2)

class ConvNeXtTiny(nn.Module):
    """convnext_tiny's shape, shortened: a 4x4 stride-4 patchify stem with
    LayerNorm2d, two stages of one CNBlock each with a LayerNorm2d + 2x2
    stride-2 conv between them, pool, LayerNorm2d, classifier."""
    def __init__(self, dims=(16, 32)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        self.stage1 = CNBlock(dims[0])
        self.down = nn.Sequential(LayerNorm2d(dims[0], eps=1e-6), nn.Conv2d(dims[0], dims[1], 2, 2))
        self.stage2 = CNBlock(dims[1])
        self.norm = LayerNorm2d(dims[1], eps=1e-6)
        self.fc = nn.Linear(dims[1], 10)
    def forward(self, x):
        x = self.stage2(self.down(self.stage1(self.stem(x))))
        return self.fc(torch.flatten(self.norm(F.adaptive_avg_pool2d(x, 1)), 1))

def convnext():
    """torchvision initialises the layer scale to 1e-6, which makes each block
    the identity to float32's precision; drawn at random here so the blocks count."""
    torch.manual_seed(0)
    m = ConvNeXtTiny().eval()
    for mod in m.modules():
        if isinstance(mod, CNBlock):
            with torch.no_grad():
                mod.layer_scale.uniform_(0.5, 1.5)
    return m, (torch.randn(2, 3, 32, 32),)
