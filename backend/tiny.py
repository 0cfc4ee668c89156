"""A tiny random-weight kimi_k3 checkpoint, and expert pruning of kimi_k3 checkpoints.

Tests, benchmarks and `k3-backend doctor` need a real kimi_k3 checkpoint that loads through
`mlx_lm.load` and runs every code path of the real model (KDA and MLA attention, dense and
latent-MoE layers, attention residuals) on a CPU in milliseconds. The weights are random, so the
model's answers are noise; tests script answers through the engine's forced-token processor.

The tokenizer is a byte-level BPE trained offline on a small built-in corpus. Its vocabulary holds
the kinds of special tokens the release has: the Kimi K3 tag tokens (so mlx-lm infers the kimi_k3 tool
parser, thinking and structural markers by itself), media tokens and reserved tokens. The chat format
comes in two dialects, so tests can show that the daemon depends on no renderer's quirks:

- ``k3`` (the default) is packaged like the release: no Jinja template, a tokenizer class in
  ``tokenization_kimi.py`` referenced by ``auto_map`` (loading it needs ``trust_remote_code``) that
  renders the released Kimi K3 format (backend/tokenization_kimi.py is the file shipped; docs/engine.md);
- ``jinja`` is a made-up Jinja template in the XTML style: tools in the system message, JSON call
  bodies, ``role="tool" call=...`` results, no think or response channel in what it renders, and no
  reasoning kept in history.

Pruning keeps the checkpoint an ordinary kimi_k3 one: `num_experts` becomes the kept count, the kept experts
are renumbered 0..N-1 and the router rows (gate and e_score_correction_bias) are sliced.
"""

import argparse
import json
import shutil
from pathlib import Path

OPEN, SEP, CLOSE, EOS = "<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"
MEDIA_TOKENS = ["<|media_begin|>", "<|media_content|>", "<|media_pad|>", "<|media_end|>"]
RESERVED_TOKENS = [f"<|reserved_token_{i}|>" for i in range(16)]
SPECIAL_TOKENS = [OPEN, CLOSE, SEP, EOS, *MEDIA_TOKENS, *RESERVED_TOKENS]  # eos is id 3
VOCAB_SIZE = 1024
BASE_HIDDEN = 64  # the tiny checkpoint's width; tiny_config scales every other width with hidden
DIALECTS = ("k3", "jinja")
REMOTE_CODE = "tokenization_kimi.py"

# Attribute values are escaped like the kimi_k3 parser unescapes them (&quot; and &amp;).
CHAT_TEMPLATE = r"""
{%- macro attr(v) -%}{{ v|string|replace('&', '&amp;')|replace('"', '&quot;') }}{%- endmacro -%}
{%- macro toolset(tools) -%}
<|open|>toolset<|sep|>
{%- for t in tools -%}
{%- set f = t.function if t.function is defined else t -%}
<|open|>tool name="{{ attr(f.name) }}"<|sep|>{{ f|tojson }}<|close|>tool<|sep|>
{%- endfor -%}
<|close|>toolset<|sep|>
{%- endmacro -%}
{%- if tools and (not messages or messages[0].role != 'system') -%}
<|open|>message role="system"<|sep|>{{ toolset(tools) }}<|close|>message<|sep|><|end_of_msg|>
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'tool' -%}
<|open|>message role="tool" call="{{ attr(m.tool_call_id or m.name or '') }}"<|sep|>
{%- else -%}
<|open|>message role="{{ attr(m.role) }}"<|sep|>
{%- endif -%}
{%- if m.content is string -%}{{ m.content }}{%- endif -%}
{%- if m.role == 'system' and loop.first and tools -%}{{ toolset(tools) }}{%- endif -%}
{%- if m.role == 'assistant' and m.tool_calls -%}
<|open|>tools<|sep|>
{%- for c in m.tool_calls -%}
{%- set f = c.function if c.function is defined else c -%}
<|open|>call tool="{{ attr(f.name) }}" index="{{ loop.index }}"<|sep|><|open|>json type="object"<|sep|>
{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments|tojson }}{%- endif -%}
<|close|>json<|sep|><|close|>call<|sep|>
{%- endfor -%}
<|close|>tools<|sep|>
{%- endif -%}
<|close|>message<|sep|><|end_of_msg|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|open|>message role="assistant"<|sep|>{%- endif -%}
""".strip()

# Training text: the markup the template produces plus kernel-style C, so that both tokenize
# into several hundred merges.
_MARKUP = [
    '<|open|>message role="system"<|sep|>You audit C code for security bugs.<|close|>message<|sep|>',
    '<|open|>message role="user"<|sep|>Audit the function below.<|close|>message<|sep|><|end_of_msg|>',
    '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>The length is not checked.<|close|>think<|sep|>',
    '<|open|>tools<|sep|><|open|>call tool="report_finding" index="1"<|sep|>'
    '<|open|>json type="object"<|sep|>{"cwe": 787, "severity": "high", "title": "Out-of-bounds write", '
    '"message": "len is not checked against the buffer size", "start_line": 3, "end_line": 5, '
    '"confidence": 0.8, "trace": [{"line": 2, "note": "len from user"}], '
    '"fix": {"start_line": 3, "end_line": 3, "replacement": "if (len > sizeof(buf)) return -EINVAL;"}}'
    "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
    '<|open|>call tool="read_lines" index="2"<|sep|><|open|>json type="object"<|sep|>'
    '{"path": "drivers/net/foo.c", "start": 10, "end": 40}<|close|>json<|sep|><|close|>call<|sep|>',
    '<|open|>call tool="find_definition" index="1"<|sep|>{"symbol": "copy_from_user"}',
    '<|open|>call tool="grep" index="1"<|sep|>{"pattern": "kmalloc", "path": "fs/"}',
    '<|open|>message role="tool" call="1"<|sep|>ok<|close|>message<|sep|><|end_of_msg|>',
    '<|open|>toolset<|sep|><|open|>tool name="report_finding"<|sep|>{"name": "report_finding", '
    '"description": "Report one finding", "parameters": {"type": "object", "properties": '
    '{"cwe": {"type": "integer"}, "severity": {"type": "string", "enum": ["critical", "high", '
    '"medium", "low", "info"]}}, "required": ["cwe"]}}<|close|>tool<|sep|><|close|>toolset<|sep|>',
]
_C_CODE = r"""
static long foo_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct foo_dev *dev = file->private_data;
	char buf[64];
	size_t len;

	if (copy_from_user(&len, (void __user *)arg, sizeof(len)))
		return -EFAULT;
	if (copy_from_user(buf, (void __user *)arg + sizeof(len), len))
		return -EFAULT;
	mutex_lock(&dev->lock);
	memcpy(dev->data, buf, len);
	mutex_unlock(&dev->lock);
	return 0;
}

SYSCALL_DEFINE3(foo_write, unsigned int, fd, const char __user *, ubuf, size_t, count)
{
	struct fd f = fdget(fd);
	char *kbuf = kmalloc(count, GFP_KERNEL);
	int ret = -EINVAL;

	if (!kbuf)
		return -ENOMEM;
	if (copy_from_user(kbuf, ubuf, count)) {
		ret = -EFAULT;
		goto out;
	}
	for (int i = 0; i <= count; i++)
		kbuf[i] ^= 0x5a;
	ret = kernel_write(f.file, kbuf, count, &f.file->f_pos);
out:
	kfree(kbuf);
	fdput(f);
	return ret;
}

int parse_header(const unsigned char *p, unsigned int n, struct hdr *h)
{
	if (n < sizeof(*h))
		return -1;
	h->len = p[0] << 8 | p[1];
	h->type = p[2];
	strcpy(h->name, (const char *)p + 3);
	sprintf(h->label, "%s-%d", h->name, h->type);
	return h->len > n ? -1 : 0;
}

static void free_node(struct list_head *head)
{
	struct node *pos, *tmp;

	list_for_each_entry_safe(pos, tmp, head, list) {
		list_del(&pos->list);
		kfree(pos);
	}
	spin_lock_irqsave(&lock, flags);
	atomic_dec(&refcount);
	spin_unlock_irqrestore(&lock, flags);
}
"""


def make_tiny(
    out_dir: str | Path,
    *,
    experts: int = 8,
    layers: int = 4,
    hidden: int = BASE_HIDDEN,
    seed: int = 0,
    keep: list[int] | None = None,
    dialect: str = "k3",
) -> Path:
    """Write a tiny kimi_k3 checkpoint to `out_dir` (pruned to `keep` if given) and return the path.

    Deterministic given the arguments: the same seed gives byte-identical weights. `dialect` is the chat
    format (see the module docstring); both dialects share the weights and the vocabulary. `hidden` scales
    every width (`tiny_config`): bench/backend_vs_mlx_server.py uses 8 layers of 512 for a checkpoint whose
    forward pass, not the serving code around it, takes most of a step.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}")
    out = Path(out_dir)
    if keep is None:
        _write_full(out, experts=experts, layers=layers, hidden=hidden, seed=seed, dialect=dialect)
        return out
    full = out.with_name(out.name + ".full")
    _write_full(full, experts=experts, layers=layers, hidden=hidden, seed=seed, dialect=dialect)
    try:
        return prune(full, out, keep)
    finally:
        shutil.rmtree(full, ignore_errors=True)


def tiny_config(*, experts: int = 8, layers: int = 4, hidden: int = BASE_HIDDEN) -> dict:
    """The kimi_k3 config of notes §1: KDA layers then one MLA layer, dense layer 0, latent MoE after.

    Heads (4) and every sharded dimension divide by 2, so it runs tensor-parallel on 2 ranks. ``hidden`` (a
    multiple of 64) scales every width with it, head dimensions included; the head count stays 4.
    """
    if layers < 2:
        raise ValueError("a tiny kimi_k3 needs at least 2 layers (one dense, one MoE)")
    if experts < 2:
        raise ValueError("a tiny kimi_k3 needs at least 2 experts (2 are routed per token)")
    if hidden < BASE_HIDDEN or hidden % BASE_HIDDEN:
        raise ValueError(f"hidden must be a positive multiple of {BASE_HIDDEN}, got {hidden}")
    k = hidden // BASE_HIDDEN
    text = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128 * k,
        "rms_norm_eps": 1e-05,
        "hidden_act": "situ",
        "activation_situ_beta": 1.0,
        "linear_attn_config": {
            "kda_layers": list(range(1, layers)),
            "full_attn_layers": [layers],
            "num_heads": 4,
            "head_dim": 16 * k,
            "short_conv_kernel_size": 4,
        },
        "attn_res_block_size": 2,
        "q_lora_rank": 32 * k,
        "kv_lora_rank": 32 * k,
        "qk_nope_head_dim": 16 * k,
        "qk_rope_head_dim": 8 * k,
        "v_head_dim": 16 * k,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "num_experts": experts,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": 64 * k,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 2.5,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_expert_group": 1,
        "topk_group": 1,
        "routed_expert_hidden_size": 32 * k,
        "latent_moe_use_norm": True,
        "tie_word_embeddings": False,
    }
    return {
        "model_type": "kimi_k3",
        "architectures": ["KimiK3ForCausalLM"],
        "random_weights": True,  # the daemon's welcome says so: what it finds is noise (k3lsp eval's header)
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "torch_dtype": "float32",
        "text_config": text,
    }


def _write_full(out: Path, *, experts: int, layers: int, hidden: int, seed: int, dialect: str) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import kimi_k3
    from mlx_lm.utils import save_model

    config = tiny_config(experts=experts, layers=layers, hidden=hidden)
    mx.random.seed(seed)
    model = kimi_k3.Model(kimi_k3.ModelArgs.from_dict(config))
    # Zero-initialised parameters would make routing bias and KDA time steps trivial; give them
    # values so pruning and sharding tests see every tensor matter.
    nonzero = [
        (name, 0.5 * mx.random.normal(value.shape))
        for name, value in tree_flatten(model.parameters())
        if name.endswith(("e_score_correction_bias", "dt_bias"))
    ]
    model.load_weights(nonzero, strict=False)
    mx.eval(model.parameters())
    out.mkdir(parents=True, exist_ok=True)
    save_model(out, model)
    _write_json(out / "generation_config.json", {"eos_token_id": config["eos_token_id"]})
    _write_tokenizer(out, dialect)
    _write_json(out / "config.json", config)  # last: a folder with it is whole (the demo reuses one that has it)


def _write_tokenizer(out: Path, dialect: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.save(str(out / "tokenizer.json"))
    config = {"eos_token": EOS, "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False}
    if dialect == "jinja":
        config |= {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}
    else:  # the release's packaging: the renderer is the tokenizer class's own Python code
        shutil.copyfile(Path(__file__).with_name(REMOTE_CODE), out / REMOTE_CODE)
        config |= {
            "tokenizer_class": "KimiK3Tokenizer",
            "auto_map": {"AutoTokenizer": [None, "tokenization_kimi.KimiK3Tokenizer"]},
        }
    _write_json(out / "tokenizer_config.json", config)


def _corpus() -> list[str]:
    """Markup of both dialects, the audit prompt and tool schemas, and C: what the tiny model's prompts are
    made of."""
    from backend import tokenization_kimi
    from backend.prompts import AUDIT_TOOLS, EXPLAIN_SYSTEM_PROMPT, SYSTEM_PROMPT

    prompt = [SYSTEM_PROMPT, EXPLAIN_SYSTEM_PROMPT, *(json.dumps(t["function"]) for t in AUDIT_TOOLS)]
    call = {"function": {"name": "read_lines", "arguments": {"path": "drivers/net/foo.c", "start": 10, "end": 40}}}
    k3 = tokenization_kimi.render(
        [
            {"role": "user", "content": "Audit the function below."},
            {
                "role": "assistant",
                "reasoning_content": "The length is not checked.",
                "content": "Let me read more.",
                "tool_calls": [call],
            },
            {"role": "tool", "name": "read_lines", "content": "ok"},
        ],
        AUDIT_TOOLS,
        add_generation_prompt=True,
        thinking_effort="low",
    )
    return [*_MARKUP, k3] * 4 + prompt * 3 + _C_CODE.splitlines(keepends=True) * 2


def prune(src_dir: str | Path, out_dir: str | Path, keep: list[int]) -> Path:
    """Write a copy of the kimi_k3 checkpoint `src_dir` that keeps only the routed experts `keep`.

    Works on mlx-layout checkpoints (what `make_tiny`, `mlx_lm.convert` and this function write),
    quantized or not: every tensor under `mlp.switch_mlp.` and the router (`mlp.gate.*`,
    `mlp.e_score_correction_bias`) is sliced along its expert axis 0. Sized for test and doctor
    checkpoints: all weights are loaded at once and written as one safetensors file.
    """
    import mlx.core as mx

    src, out = Path(src_dir), Path(out_dir)
    config = json.loads((src / "config.json").read_text())
    text = config.get("text_config", config)
    total = int(text["num_experts"])
    keep = _check_keep(keep, total, text)
    weights = {}
    for file in sorted(src.glob("*.safetensors")):
        weights.update(mx.load(str(file)))
    if any(".block_sparse_moe.experts." in k for k in weights):
        raise ValueError(f"{src}: per-expert (release) layout; convert with mlx_lm.convert first")
    index = mx.array(keep)
    sliced = 0
    for name, value in weights.items():
        if _is_expert_axis(name):
            if value.shape[0] != total:
                raise ValueError(f"{name}: expected {total} experts on axis 0, got {value.shape}")
            weights[name] = value[index]
            sliced += 1
    if sliced == 0:
        raise ValueError(f"{src}: no routed-expert tensors found; is this a kimi_k3 MoE checkpoint?")
    out.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_file() and not item.name.startswith(("model", ".")) and item.name != "config.json":
            shutil.copy2(item, out / item.name)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write_json(
        out / "model.safetensors.index.json",
        {
            "metadata": {"total_size": sum(v.nbytes for v in weights.values())},
            "weight_map": dict.fromkeys(sorted(weights), "model.safetensors"),
        },
    )
    text["num_experts"] = len(keep)
    # Which experts of the unpruned model survive, for doctor and tests (mlx-lm ignores the key).
    earlier = config.get("kept_experts")
    config["kept_experts"] = [earlier[k] for k in keep] if earlier else keep
    _write_json(out / "config.json", config)
    return out


def _check_keep(keep: list[int], total: int, text: dict) -> list[int]:
    keep = [int(k) for k in keep]
    if len(set(keep)) != len(keep) or any(not 0 <= k < total for k in keep):
        raise ValueError(f"keep must list distinct expert ids in 0..{total - 1}, got {keep}")
    if len(keep) < int(text.get("num_experts_per_token", 1)):
        raise ValueError(f"keep has {len(keep)} experts, fewer than num_experts_per_token")
    groups = int(text.get("num_expert_group", 1))
    if len(keep) % groups or (groups > 1 and len(keep) // groups < 2):
        raise ValueError(f"{len(keep)} experts do not split into {groups} groups of at least 2")
    return sorted(keep)


def _is_expert_axis(name: str) -> bool:
    return ".mlp.switch_mlp." in name or ".mlp.gate." in name or name.endswith(".mlp.e_score_correction_bias")


def spread(total: int, n: int) -> list[int]:
    """`n` expert ids spread evenly over 0..total-1 (what `make-tiny --prune-to N` keeps)."""
    if not 0 < n <= total:
        raise ValueError(f"cannot keep {n} of {total} experts")
    return [i * total // n for i in range(n)]


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


# --- `k3-backend make-tiny` ----------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="output directory")
    p.add_argument("--experts", type=int, default=8, help="routed experts per MoE layer (default 8)")
    p.add_argument("--layers", type=int, default=4, help="decoder layers, the last one MLA (default 4)")
    p.add_argument(
        "--hidden",
        type=int,
        default=BASE_HIDDEN,
        help=f"hidden size, a multiple of {BASE_HIDDEN} (default {BASE_HIDDEN})",
    )
    p.add_argument("--prune-to", type=int, metavar="N", help="keep N experts spread evenly, renumbered 0..N-1")
    p.add_argument("--seed", type=int, default=0, help="the random weights' seed: the same seed, the same checkpoint")
    p.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="k3",
        help="chat format: k3 = the release's packaging (a remote-code tokenizer class: serve it with "
        "--trust-remote-code), jinja = a made-up Jinja template (default k3)",
    )


def run(args) -> int:
    keep = spread(args.experts, args.prune_to) if args.prune_to is not None else None
    out = make_tiny(
        args.dir,
        experts=args.experts,
        layers=args.layers,
        hidden=args.hidden,
        seed=args.seed,
        keep=keep,
        dialect=args.dialect,
    )
    print(out)
    return 0
