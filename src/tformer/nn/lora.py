"""LoRA (Hu et al. 2021): a frozen linear layer with a trainable low-rank update beside it.

    y = x Wᵀ + b  +  (α / r) · dropout(x) Aᵀ Bᵀ          W: (out, in) frozen;  A: (r, in);  B: (out, r), starts at 0

Only A and B train: r · (in + out) numbers per layer instead of in · out, and no gradient of W is ever kept. B starts
at zero, so the model starts exactly where the pretrained one is; A starts random (Kaiming uniform, as PEFT's).
``merge_lora`` folds α/r · B A into W: the same function as one plain ``nn.Linear`` again, for speed and for export.

One matrix may hold several Hugging Face layers: tformer stores W_Q, W_K, W_V as one ``qkv_proj`` (rows Q, K, V),
where Llama, BERT and Marian have ``q_proj``, ``k_proj``, ``v_proj``. A :class:`LoRALinear` therefore holds one
low-rank pair per *part*, a block of rows: ``q_proj`` over the rows of Q, ``v_proj`` over those of V (no pair on K
unless it is targeted), each exactly PEFT's pair on that Hugging Face layer. A whole matrix is one part, ``all``.
The parts share one dropout mask of x per forward, where PEFT draws one per layer (the same in eval mode).

Which layers get a pair is said by *target names*, matched as shell patterns (``fnmatch``):

    attn.q_proj  attn.k_proj  attn.v_proj   parts of the self-attention's W_Q/W_K/W_V (a split layout)
    attn.qkv_proj                           the whole W_Q/W_K/W_V (GPT-2's c_attn: a fused layout)
    attn.out_proj                           W_O
    cross_attn.*                            the same names in a translator decoder's cross-attention
    ffn.linear1  ffn.linear2                the paper's feed-forward (GPT-2, BERT, Marian)
    ffn.gate_proj  ffn.up_proj  ffn.down_proj   a gated feed-forward (Llama, Qwen, Gemma)

``attn.*`` is every attention projection, ``ffn.*`` the feed-forward, ``*`` all of them. Whether Q, K and V are parts
or one matrix is the model's Hugging Face layout (``fused_qkv``), so that each pair is a PEFT pair.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "LoraConfig",
    "LoRALinear",
    "target_names",
    "add_lora",
    "apply_layers",
    "merge_lora",
    "lora_layers",
    "has_lora",
    "lora_record",
    "apply_record",
]

ATTENTION = {"self_attn": "attn", "cross_attn": "cross_attn"}  # module name -> the targets' prefix
FEED_FORWARD = {"ff": "ffn"}
QKV_PARTS = ("q_proj", "k_proj", "v_proj")
WHOLE = "all"  # the part name of a whole matrix


@dataclass(frozen=True)
class LoraConfig:
    """Rank ``r``, scale ``alpha`` (the update is α / r · B A), ``dropout`` on the pairs' input, ``targets`` (target
    name patterns, see the module docstring), ``fused_qkv``: Q, K, V as one part (GPT-2's layout) or three."""

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    targets: tuple[str, ...] = ("attn.*",)
    fused_qkv: bool = False
    layers: dict[str, list[str]] = field(default_factory=dict)  # set by add_lora: module name -> its parts

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"lora r must be an integer >= 1, got {self.r!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not self.alpha > 0:
            raise ValueError(f"lora alpha must be a number > 0, got {self.alpha!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"lora dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.targets, str) or not self.targets or not all(isinstance(t, str) and t for t in self.targets):
            raise ValueError(f"lora targets must be a non-empty list of target names, got {self.targets!r}")

    @property
    def scaling(self) -> float:
        return self.alpha / self.r

    def to_dict(self) -> dict:
        return {**asdict(self), "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, d: dict) -> LoraConfig:
        known = {"r", "alpha", "dropout", "targets", "fused_qkv", "layers"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown lora fields {unknown}")
        return cls(**{**d, "targets": tuple(d.get("targets", ("attn.*",)))})


class LoRALinear(nn.Module):
    """A linear layer's frozen ``weight`` (out, in) and ``bias`` with one trainable pair ``lora_A[p]`` (r, in),
    ``lora_B[p]`` (rows of p, r) per part p (``parts``: name -> (first row, end row))."""

    weight: nn.Parameter
    bias: nn.Parameter | None

    def __init__(self, base: nn.Module, parts: dict[str, tuple[int, int]], r: int, alpha: float, dropout: float):
        super().__init__()
        weight = base.weight
        assert isinstance(weight, torch.Tensor)
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight)
        self.weight.requires_grad_(False)
        bias = getattr(base, "bias", None)
        self.bias = bias if isinstance(bias, nn.Parameter) else None
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.parts, self.r, self.alpha, self.scaling = dict(parts), r, alpha, alpha / r
        device, dtype = weight.device, weight.dtype
        self.lora_A = nn.ParameterDict(
            {p: nn.Parameter(torch.empty(r, self.in_features, device=device, dtype=dtype)) for p in self.parts}
        )
        self.lora_B = nn.ParameterDict(
            {
                p: nn.Parameter(torch.zeros(end - start, r, device=device, dtype=dtype))
                for p, (start, end) in self.parts.items()
            }
        )
        for a in self.lora_A.values():
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))  # PEFT's (and nn.Linear's) init of A; B stays 0
        self.dropout = nn.Dropout(dropout)

    def delta_rows(self) -> torch.Tensor:
        """B of all parts as one (out, P·r) matrix, zero outside each part's rows and columns: the update is then
        ``dropout(x) · [A₁; A₂ …]ᵀ · Bᵀ``, two products whatever the parts."""
        if len(self.parts) == 1 and next(iter(self.parts.values())) == (0, self.out_features):
            return self.lora_B[next(iter(self.parts))]  # one pair over the whole matrix: B itself
        blocks = []
        for i, (p, (start, end)) in enumerate(self.parts.items()):
            b = self.lora_B[p]
            blocks.append(F.pad(b, (i * self.r, (len(self.parts) - 1 - i) * self.r, start, self.out_features - end)))
        return torch.stack(blocks).sum(0) if len(blocks) > 1 else blocks[0]  # (out, P·r)

    def stacked_a(self) -> torch.Tensor:
        """A of all parts, in the order of ``parts``, as one (P·r, in) matrix (a ParameterDict keeps its keys
        sorted, so the order is always read from ``parts``)."""
        if len(self.parts) == 1:
            return self.lora_A[next(iter(self.parts))]
        return torch.cat([self.lora_A[p] for p in self.parts])

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        """α / r · B A dropout(x): (..., out)."""
        return F.linear(F.linear(self.dropout(x), self.stacked_a()), self.delta_rows()) * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + self.delta(x)

    def forward_rows(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Output features ``start:end`` only (cross-attention's W_Q, or W_K and W_V; see
        :func:`tformer.nn.attention.project_rows`)."""
        bias = None if self.bias is None else self.bias[start:end]
        return F.linear(x, self.weight[start:end], bias) + self.delta(x)[..., start:end]

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """W + α / r · B A, in W's dtype (the product in float32)."""
        a = self.stacked_a().float()
        return (self.weight.float() + self.scaling * self.delta_rows().float() @ a).to(self.weight.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, r={self.r}, alpha={self.alpha:g}, parts={list(self.parts)}"


def _linears(model: nn.Module) -> Iterable[tuple[str, str, str, nn.Module]]:
    """(module name, target prefix, attribute, layer) of every projection a LoRA pair may go beside."""
    for name, module in model.named_modules():
        short = name.rpartition(".")[2]
        prefix = ATTENTION.get(short) or FEED_FORWARD.get(short)
        if prefix is None:
            continue
        for attr, child in module.named_children():
            if (
                isinstance(getattr(child, "weight", None), torch.Tensor)
                and child.weight.dim() == 2
                and attr != "q_norm"
            ):
                yield name, prefix, attr, child


def target_names(model: nn.Module, fused_qkv: bool = False) -> list[str]:
    """The target names this model offers (see the module docstring), in model order."""
    names: list[str] = []
    for _, prefix, attr, _ in _linears(model):
        parts = [attr] if attr != "qkv_proj" or fused_qkv else list(QKV_PARTS)
        names += [f"{prefix}.{p}" for p in parts if f"{prefix}.{p}" not in names]
    return names


def _qkv_rows(attention: nn.Module) -> dict[str, tuple[int, int]]:
    """The rows of Q, K and V in an attention's ``qkv_proj``."""
    q, kv = int(getattr(attention, "q_dim")), int(getattr(attention, "kv_dim"))  # noqa: B009
    return {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj": (q + kv, q + 2 * kv)}


def _rows(parent: nn.Module, attr: str, child: nn.Module, fused_qkv: bool) -> dict[str, tuple[int, int]]:
    """The parts a projection offers: Q, K, V of a split ``qkv_proj``, else the whole matrix."""
    if attr == "qkv_proj" and not fused_qkv:
        return _qkv_rows(parent)
    weight = child.weight
    assert isinstance(weight, torch.Tensor)
    return {WHOLE: (0, int(weight.shape[0]))}


def add_lora(model: nn.Module, config: LoraConfig) -> LoraConfig:
    """Freeze every parameter of ``model`` and put a :class:`LoRALinear` in place of each targeted projection;
    returns the config with ``layers`` (module name → its parts) filled, what :func:`lora_layers` reads back. A pattern
    that matches nothing is refused, naming the names this model offers."""
    offered = target_names(model, config.fused_qkv)
    for pattern in config.targets:
        if not fnmatch.filter(offered, pattern):
            hint = ""
            if pattern.endswith(QKV_PARTS) and config.fused_qkv:
                hint = " (this model's W_Q, W_K, W_V are one matrix in its Hugging Face layout, GPT-2's c_attn)"
            elif pattern.endswith("qkv_proj") and not config.fused_qkv:
                hint = " (this model's Hugging Face layout has q_proj, k_proj and v_proj apart: name them)"
            raise ValueError(f"--lora-targets {pattern!r} matches no layer of this model{hint}; it has {offered}")
    for p in model.parameters():
        p.requires_grad_(False)
    layers: dict[str, list[str]] = {}
    for name, prefix, attr, child in list(_linears(model)):
        parent = model.get_submodule(name)
        rows = _rows(parent, attr, child, config.fused_qkv)
        wanted = {
            part: span
            for part, span in rows.items()
            if any(fnmatch.fnmatch(f"{prefix}.{attr if part == WHOLE else part}", t) for t in config.targets)
        }
        if not wanted:
            continue
        setattr(parent, attr, LoRALinear(child, wanted, config.r, config.alpha, config.dropout))
        layers[f"{name}.{attr}"] = list(wanted)
    return LoraConfig(config.r, config.alpha, config.dropout, config.targets, config.fused_qkv, layers)


def apply_layers(model: nn.Module, config: LoraConfig) -> None:
    """Rebuild the :class:`LoRALinear` layers ``config.layers`` names (a saved model's: its pairs are then read from
    the file), freezing the rest as :func:`add_lora` does."""
    for p in model.parameters():
        p.requires_grad_(False)
    for path, parts in config.layers.items():
        name, _, attr = path.rpartition(".")
        parent = model.get_submodule(name)
        child = getattr(parent, attr, None)
        if child is None or not isinstance(getattr(child, "weight", None), torch.Tensor):
            raise ValueError(f"lora layer {path!r} is not a projection of this model")
        rows = _rows(parent, attr, child, config.fused_qkv)
        if not set(parts) <= set(rows):
            raise ValueError(f"lora layer {path!r}: parts {parts} are not among {sorted(rows)}")
        setattr(parent, attr, LoRALinear(child, {p: rows[p] for p in parts}, config.r, config.alpha, config.dropout))


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """Module name → :class:`LoRALinear`, in model order."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def has_lora(model: nn.Module) -> bool:
    return any(isinstance(m, LoRALinear) for m in model.modules())


@torch.no_grad()
def merge_lora(model: nn.Module, names: Sequence[str] | None = None) -> nn.Module:
    """Fold every pair into its weight (W + α / r · B A) and put a plain ``nn.Linear`` back in its place, with the
    weight and bias Parameter objects it had; the model then computes the same function, as fast as before LoRA.
    Its parameters stay frozen (``requires_grad`` is the caller's to set again). Returns ``model``."""
    for name, layer in list(lora_layers(model).items()):
        if names is not None and name not in names:
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        plain = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
        layer.weight.copy_(layer.merged_weight())
        plain.weight = layer.weight
        if layer.bias is not None:
            plain.bias = layer.bias
        setattr(parent, attr, plain)
    return model


def lora_record(model: nn.Module) -> dict | None:
    """What ``config.json`` records of a model with LoRA layers (``lora``: r, alpha, dropout, fused_qkv and each
    layer's parts), read back by :func:`apply_record`; None without one."""
    layers = lora_layers(model)
    if not layers:
        return None
    first = next(iter(layers.values()))
    fused = any(name.endswith(".qkv_proj") and WHOLE in m.parts for name, m in layers.items())
    return {
        "r": first.r,
        "alpha": first.alpha,
        "dropout": first.dropout.p,
        "fused_qkv": fused,
        "layers": {name: list(m.parts) for name, m in layers.items()},
    }


def apply_record(model: nn.Module, record: object, where: str) -> nn.Module:
    """The :class:`LoRALinear` layers a ``config.json``'s ``lora`` record names, put into ``model`` (just built) for
    the saved weights to fill; a record that does not fit is a ValueError naming ``where`` (the file)."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: lora must be an object, got {record!r:.60}")
    layers = record.get("layers")
    if not isinstance(layers, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and v and all(isinstance(p, str) for p in v)
        for k, v in layers.items()
    ):
        raise ValueError(f"{where}: lora.layers must map layer names to lists of parts")
    try:
        config = LoraConfig(
            record.get("r"),  # type: ignore[arg-type]
            record.get("alpha"),  # type: ignore[arg-type]
            record.get("dropout", 0.0),  # type: ignore[arg-type]
            fused_qkv=bool(record.get("fused_qkv", False)),
            layers=layers,
        )
        apply_layers(model, config)
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{where}: lora: {err}") from None
    return model
