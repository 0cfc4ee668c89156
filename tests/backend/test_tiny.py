"""The tiny checkpoint loads through mlx-lm as a kimi_k3 with the Kimi K3 tool parser and channels, packaged
like the release (a remote-code tokenizer class) or with a Jinja template; pruning is exact."""

import functools
import hashlib
import json

import mlx.core as mx
import pytest
from mlx_lm.models.kimi_k3 import KimiK3SparseMoE

from backend.cli import main
from backend.dist import RemoteCodeError, load_model, load_tokenizer
from backend.tiny import MEDIA_TOKENS, RESERVED_TOKENS, make_tiny, prune, spread
from tests.conftest import PRUNE_KEEP, TINY_LAYERS

load = functools.partial(load_model, trust_remote_code=True)  # the tiny tokenizer class is this repository's code


def test_loads_as_kimi_k3_with_tool_parser_and_channels(checkpoint):
    model, tok = load(str(checkpoint.path))
    text = model.args.text_config
    assert model.model_type == "kimi_k3"
    assert text.num_experts == 8 and text.num_hidden_layers == TINY_LAYERS
    assert tok.has_tool_calling
    assert tok.tool_parser.__module__ == "mlx_lm.tool_parsers.kimi_k3"
    assert tok.tool_call_start == "<|open|>tools<|sep|>"
    assert (tok.think_start, tok.think_end) == ("<|open|>think<|sep|>", "<|close|>think<|sep|>")
    assert tok.structural_markers == ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")
    assert tok.eos_token_ids == {tok.convert_tokens_to_ids("<|end_of_msg|>")}
    assert len(tok) <= text.vocab_size
    for tag in ("<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>", *MEDIA_TOKENS, *RESERVED_TOKENS):
        assert len(tok.encode(tag, add_special_tokens=False)) == 1, tag
    # Two heads per rank on a pair, for both attention kinds.
    assert text.num_attention_heads % 2 == 0 and text.linear_attn_config["num_heads"] % 2 == 0
    logits = model(mx.array([tok.encode("int main(void)")]))
    assert logits.shape[-1] == text.vocab_size and bool(mx.isfinite(logits).all())


def test_k3_packaging_is_the_releases(tiny_model):
    """No Jinja template: a tokenizer class in tokenization_kimi.py named by auto_map, which mlx-lm calls with
    `thinking=` (the release's keyword), and which needs trust_remote_code to load."""
    config = json.loads((tiny_model / "tokenizer_config.json").read_text())
    assert "chat_template" not in config
    assert config["auto_map"]["AutoTokenizer"][1] == "tokenization_kimi.KimiK3Tokenizer"
    assert (tiny_model / "tokenization_kimi.py").is_file()
    tok = load_tokenizer(str(tiny_model), trust_remote_code=True)
    assert type(tok._tokenizer).__name__ == "KimiK3Tokenizer" and tok._thinking_kwarg == "thinking"
    with pytest.raises(RemoteCodeError, match="--trust-remote-code"):
        load_tokenizer(str(tiny_model))


def test_k3_renderer_renders_the_release_format(tiny_model):
    tok = load_tokenizer(str(tiny_model), trust_remote_code=True)
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "find it"},
        {
            "role": "assistant",
            "reasoning_content": "Search.",
            "content": "Looking.",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "grep", "arguments": {"pattern": 'a"b', "n": 2}}}
            ],
        },
        {"role": "tool", "tool_call_id": "1", "name": "grep", "content": "x.c:1"},
    ]
    text = tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False, thinking_effort="high"
    )
    assert text.startswith('<|open|>message role="system" type="tool-declare"<|sep|># Tools\n')
    assert '```json\n[{"name":"grep","parameters":{"type":"object"}}]\n```' in text
    assert '<|open|>message role="system" type="thinking-effort"<|sep|>' in text and "effort high" in text
    assert (
        '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>Search.<|close|>think<|sep|>'
        "<|open|>response<|sep|>Looking.<|close|>response<|sep|>"
    ) in text
    assert '<|open|>argument key="n" type="number"<|sep|>2<|close|>argument<|sep|>' in text
    start = text.index(tok.tool_call_start)
    section = text[start + len(tok.tool_call_start) : text.index(tok.tool_call_end)]
    assert tok.tool_parser(section) == [{"name": "grep", "arguments": {"pattern": 'a"b', "n": 2}}]
    assert '<|open|>message role="tool" name="grep"<|sep|>x.c:1<|close|>message<|sep|><|end_of_msg|>' in text
    assert text.endswith('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>')
    off = tok.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert "thinking-effort" not in off and off.endswith("<|open|>response<|sep|>")


def test_jinja_template_renders_tools_and_tool_calls(jinja_model):
    tok = load_tokenizer(str(jinja_model))  # no code of its own to trust
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "find it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "grep", "arguments": {"pattern": 'a"b'}}}
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "x.c:1"},
    ]
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert '<|open|>tool name="grep"<|sep|>' in text
    start = text.index(tok.tool_call_start)
    section = text[start + len(tok.tool_call_start) : text.index(tok.tool_call_end)]
    assert tok.tool_parser(section) == [{"name": "grep", "arguments": {"pattern": 'a"b'}}]
    assert text.endswith('<|open|>message role="assistant"<|sep|>')
    assert '<|open|>message role="tool" call="1"<|sep|>x.c:1' in text


def _digests(path):
    """The checkpoint's files by content; hidden ones (the fingerprint's cache of sampled hashes) are not its own."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir()) if f.name[0] != "."}


def test_deterministic_given_seed(tiny_model, tmp_path):
    assert _digests(make_tiny(tmp_path / "again", layers=TINY_LAYERS)) == _digests(tiny_model)
    other = _digests(make_tiny(tmp_path / "seed1", seed=1, layers=TINY_LAYERS))
    assert other["model.safetensors"] != _digests(tiny_model)["model.safetensors"]
    assert other["tokenizer.json"] == _digests(tiny_model)["tokenizer.json"]


def test_config_json_is_the_last_file_written(tmp_path):
    """A folder with config.json is a whole checkpoint: `k3-backend demo` builds its tiny one once and reuses the
    folder when config.json is there, so a build that Ctrl-C ended while it wrote the tokenizer must not have one
    yet (it had: every later demo would have served a checkpoint without its tokenizer)."""
    out = make_tiny(tmp_path / "t")
    written = {f.name: f.stat().st_mtime_ns for f in out.iterdir()}
    assert all(written["config.json"] >= t for t in written.values()), written


def test_dialects_share_weights_and_vocabulary(tiny_model, jinja_model, tmp_path, capsys):
    k3, jinja = _digests(tiny_model), _digests(jinja_model)
    assert k3["model.safetensors"] == jinja["model.safetensors"] and k3["tokenizer.json"] == jinja["tokenizer.json"]
    assert "tokenization_kimi.py" not in jinja
    assert main(["make-tiny", str(tmp_path / "j"), "--dialect", "jinja", "--layers", str(TINY_LAYERS)]) == 0
    assert _digests(tmp_path / "j") == jinja


def _mask_dropped(model, keep):
    for layer in model.language_model.model.layers:
        if isinstance(layer.mlp, KimiK3SparseMoE):
            bias = layer.mlp.e_score_correction_bias
            dropped = mx.array([i not in keep for i in range(bias.shape[0])])
            layer.mlp.e_score_correction_bias = mx.where(dropped, -1e9, bias)


def test_pruned_equals_full_with_dropped_experts_masked(tiny_model, pruned_model):
    config = json.loads((pruned_model / "config.json").read_text())
    assert config["text_config"]["num_experts"] == len(PRUNE_KEEP)
    assert config["kept_experts"] == PRUNE_KEEP
    pruned, tok = load(str(pruned_model))
    full, _ = load(str(tiny_model))
    moe = pruned.language_model.model.layers[1].mlp
    assert moe.gate.weight.shape[0] == len(PRUNE_KEEP) and moe.switch_mlp.gate_proj.weight.shape[0] == len(PRUNE_KEEP)
    tokens = mx.array([tok.encode("static long foo_ioctl(struct file *file, unsigned int cmd)")])
    unmasked = full(tokens)
    _mask_dropped(full, PRUNE_KEEP)
    expected, got = full(tokens), pruned(tokens)
    assert mx.allclose(got, expected, atol=1e-5).item()
    assert not mx.allclose(got, unmasked, atol=1e-3).item()  # the dropped experts did matter


def test_prune_of_pruned_records_original_ids(pruned_model, tmp_path):
    again = prune(pruned_model, tmp_path / "twice", [1, 3, 4])
    assert json.loads((again / "config.json").read_text())["kept_experts"] == [PRUNE_KEEP[i] for i in (1, 3, 4)]
    model, _ = load(str(again))
    assert model.args.text_config.num_experts == 3


@pytest.mark.parametrize("keep", [[0], [1, 1, 2], [0, 8], [-1, 2]])
def test_prune_rejects_bad_keep(tiny_model, tmp_path, keep):
    with pytest.raises(ValueError):
        prune(tiny_model, tmp_path / "bad", keep)
    assert not (tmp_path / "bad").exists()


def test_cli_make_tiny_prune_to(tmp_path, capsys):
    assert main(["make-tiny", str(tmp_path / "m"), "--experts", "6", "--layers", "3", "--prune-to", "4"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["text_config"]["num_experts"] == 4 and config["text_config"]["num_hidden_layers"] == 3
    assert config["kept_experts"] == spread(6, 4) == [0, 1, 3, 4]
    assert not (tmp_path / "m.full").exists()
    model, _ = load(str(tmp_path / "m"))
    assert model.args.text_config.num_experts == 4


def test_cli_reports_bad_arguments(tmp_path, capsys):
    assert main(["make-tiny", str(tmp_path / "m"), "--prune-to", "9"]) == 2
    assert "cannot keep 9 of 8 experts" in capsys.readouterr().err


def test_hidden_scales_every_width(tmp_path):
    """A wider checkpoint (bench/backend_vs_mlx_server.py's larger one) is still an ordinary kimi_k3: the widths
    scale with the hidden size, the head count and everything tensor parallelism splits stay even."""
    model, tok = load(str(make_tiny(tmp_path / "wide", layers=2, hidden=128)))
    text = model.args.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads) == (128, 2, 4)
    assert text.linear_attn_config["head_dim"] == 32 and text.moe_intermediate_size == 128
    logits = model(mx.array([tok.encode("int main(void)")]))
    assert logits.shape[-1] == text.vocab_size and bool(mx.isfinite(logits).all())
    with pytest.raises(ValueError, match="multiple of 64"):
        make_tiny(tmp_path / "odd", hidden=96)
