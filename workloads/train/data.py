"""Token shards on shared storage: the file format, a checker, a synthetic writer, a Dataset.

Shard format (little-endian), one file per shard, e.g. ``/fsx/data/train-00000.bin``::

    offset  size  field
    0       8     magic  b"GPUCTOK\\0"
    8       4     version (uint32) = 1
    12      4     dtype code (uint32): 1 = uint16, 2 = uint32
    16      8     token count (uint64)
    24      4     vocab size the tokens were written for (uint32)
    28      4     reserved, zero
    32      ...   token count x itemsize bytes of tokens

The header makes a truncated copy (the file is shorter than the header promises) and a shard
written with another dtype than its header says (the sizes disagree) fail at start-up with the
file named, instead of training on garbage.

CLI::

    python -m gpu_cluster.workloads.train.data write-synthetic --out DIR --shards N --tokens-per-shard M \\
        --vocab V --seed S [--prefix train]
    python -m gpu_cluster.workloads.train.data check 'DIR/train-*.bin' [--seq-len T] [--vocab V]
"""

from __future__ import annotations

import argparse
import bisect
import glob as globlib
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpu_cluster.workloads.runtime.atomic import fsync_dir, temp_path_for
from gpu_cluster.workloads.runtime.flags import Problems

if TYPE_CHECKING:
    import torch

MAGIC = b"GPUCTOK\0"
VERSION = 1
HEADER = struct.Struct("<8sIIQII")
HEADER_BYTES = HEADER.size  # 32
DTYPES: dict[int, np.dtype] = {1: np.dtype("<u2"), 2: np.dtype("<u4")}
DTYPE_NAMES = {1: "uint16", 2: "uint32"}


@dataclass(kw_only=True, frozen=True, slots=True)
class Shard:
    """One checked shard file."""

    path: Path
    """Where the shard lives."""
    dtype_code: int
    """Key of :data:`DTYPES`."""
    n_tokens: int
    """Tokens in the file (from the header, checked against the file size)."""
    vocab_size: int
    """Vocabulary the writer declared; every token is below it."""

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.dtype_code]


class ShardError(ValueError):
    """A shard that cannot be read; the message names the file."""


def read_shard(path: Path) -> Shard:
    """Read and check one shard's header against the file's size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise ShardError(f"{path}: cannot read: {e.strerror}") from None
    if len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: truncated: {size} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, code, n_tokens, vocab, _ = HEADER.unpack(raw)
    if magic != MAGIC:
        raise ShardError(f"{path}: not a token shard (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise ShardError(f"{path}: format version {version} (this reader knows {VERSION})")
    if code not in DTYPES:
        allowed = ", ".join(f"{c}={n}" for c, n in DTYPE_NAMES.items())
        raise ShardError(f"{path}: unknown dtype code {code} (allowed: {allowed})")
    itemsize = DTYPES[code].itemsize
    expected = HEADER_BYTES + n_tokens * itemsize
    if size != expected:
        have = size - HEADER_BYTES
        detail = (
            f"header says {n_tokens} tokens of {DTYPE_NAMES[code]} = {n_tokens * itemsize} data bytes, file has {have}"
        )
        if size < expected:
            hint = "truncated (an interrupted copy?)"
            # A payload exactly half or double the promised size means the writer used
            # another dtype than the header says.
            if have * 2 == n_tokens * itemsize or have == n_tokens * itemsize * 2:
                hint = "wrong dtype (payload size fits another token width) or truncated"
        else:
            hint = "wrong dtype: more data than the header's dtype accounts for"
            if n_tokens and have % n_tokens == 0:
                hint += f" (payload fits {have // n_tokens}-byte tokens)"
        raise ShardError(f"{path}: {hint}: {detail}")
    if code == 1 and vocab > 65536:
        raise ShardError(f"{path}: vocab {vocab} does not fit uint16 tokens")
    return Shard(path=path, dtype_code=code, n_tokens=n_tokens, vocab_size=vocab)


def expand_glob(pattern: str) -> list[Path]:
    """Shard paths matching ``pattern``, sorted so every rank sees one order."""
    return sorted(Path(p) for p in globlib.glob(os.path.expanduser(pattern)) if os.path.isfile(p))


def check_shards(
    pattern: str, *, seq_len: int | None, vocab_size: int | None, flag: str = "--data"
) -> tuple[list[Shard], list[tuple[str, str]]]:
    """Every readable shard, and every problem with the set, reported together."""
    problems: list[tuple[str, str]] = []
    paths = expand_glob(pattern)
    if not paths:
        problems.append((flag, f"glob {pattern!r} matches no files"))
        return [], problems
    shards: list[Shard] = []
    for p in paths:
        try:
            shards.append(read_shard(p))
        except ShardError as e:
            problems.append((flag, str(e)))
    for s in shards:
        if seq_len is not None and s.n_tokens < seq_len + 1:
            problems.append(
                (
                    flag,
                    f"{s.path}: {s.n_tokens} tokens, fewer than seq_len + 1 = {seq_len + 1} "
                    "needed for one training window (lower --seq-len or drop the shard)",
                )
            )
        if vocab_size is not None and s.vocab_size > vocab_size:
            problems.append(
                (flag, f"{s.path}: written for vocab {s.vocab_size}, larger than the model's --vocab-size {vocab_size}")
            )
    return shards, problems


class TokenWindows:
    """Fixed-length training windows over all shards (a map-style dataset).

    Window ``i`` is ``seq_len + 1`` consecutive tokens of one shard (input, and the same
    shifted by one as target); windows start every ``seq_len`` tokens and never straddle two
    shards, so shard ``k`` holds ``(n_tokens - 1) // seq_len`` of them. Shards are opened as
    memory maps on first use: each rank reads only the pages of its own windows.

    torch is imported on first use only, so writing and checking shards on a login node
    does not pay for it.
    """

    def __init__(self, shards: list[Shard], seq_len: int) -> None:
        self.shards = shards
        self.seq_len = seq_len
        counts = [max(0, (s.n_tokens - 1) // seq_len) for s in shards]
        self._starts: list[int] = []
        total = 0
        for c in counts:
            self._starts.append(total)
            total += c
        self._len = total
        self._maps: dict[int, np.memmap] = {}

    def __len__(self) -> int:
        return self._len

    def _map(self, k: int) -> np.memmap:
        m = self._maps.get(k)
        if m is None:
            s = self.shards[k]
            m = np.memmap(s.path, dtype=s.dtype, mode="r", offset=HEADER_BYTES, shape=(s.n_tokens,))
            self._maps[k] = m
        return m

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if not 0 <= i < self._len:
            raise IndexError(f"window {i} out of range (0..{self._len - 1})")
        k = bisect.bisect_right(self._starts, i) - 1
        off = (i - self._starts[k]) * self.seq_len
        w = torch.from_numpy(np.array(self._map(k)[off : off + self.seq_len + 1], dtype=np.int64))
        return w[:-1], w[1:]


def synthetic_tokens(n: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Tokens with structure a small model can learn: runs that count up by a fixed stride.

    Each token is the previous one plus ``stride`` (mod ``vocab``); one in ten restarts at a
    random token. The cross entropy a model can reach is far below ``ln(vocab)``, so a
    falling loss shows that training works. Vectorised, so large shards write quickly.
    """
    stride = 7 % vocab or 1
    jump = rng.random(n) < 0.1
    jump[0] = True
    start_val = rng.integers(0, vocab, size=n, dtype=np.int64)
    idx = np.arange(n, dtype=np.int64)
    last_jump = np.maximum.accumulate(np.where(jump, idx, 0))
    return (start_val[last_jump] + stride * (idx - last_jump)) % vocab


def write_shard(path: Path, tokens: np.ndarray, vocab: int) -> None:
    """Write one shard under a temporary name and rename it into place."""
    code = 1 if vocab <= 65536 else 2
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"tokens outside [0, {vocab})")
    header = HEADER.pack(MAGIC, VERSION, code, int(tokens.size), vocab, 0)
    tmp = temp_path_for(path)
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(tokens.astype(DTYPES[code]).tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_synthetic(
    *, out: Path, shards: int, tokens_per_shard: int, vocab: int, seed: int, prefix: str = "train"
) -> list[Path]:
    """Write ``shards`` synthetic shards; shard ``k`` depends only on ``(seed, k)``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(shards):
        rng = np.random.default_rng([seed, k])
        path = out / f"{prefix}-{k:05d}.bin"
        write_shard(path, synthetic_tokens(tokens_per_shard, vocab, rng), vocab)
        paths.append(path)
    fsync_dir(out)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-cluster data", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-synthetic", help="write synthetic token shards atomically")
    w.add_argument("--out", required=True, help="directory to write the shards into")
    w.add_argument("--shards", required=True, help="number of shard files")
    w.add_argument("--tokens-per-shard", required=True, help="tokens in each shard")
    w.add_argument("--vocab", required=True, help="vocabulary size (token ids 0..V-1)")
    w.add_argument("--seed", default="0", help="seed; the same seed writes the same bytes")
    w.add_argument("--prefix", default="train", help="file name prefix: <prefix>-00000.bin")
    c = sub.add_parser("check", help="check every shard a glob matches and print a summary")
    c.add_argument("glob", help="shard glob, quoted, e.g. '/fsx/data/train-*.bin'")
    c.add_argument("--seq-len", default=None, help="also require seq_len + 1 tokens per shard")
    c.add_argument("--vocab", default=None, help="also require shard vocab <= this")
    args = ap.parse_args(argv)

    p = Problems()
    if args.cmd == "write-synthetic":
        shards = p.integer("--shards", args.shards, lo=1)
        tps = p.integer("--tokens-per-shard", args.tokens_per_shard, lo=2)
        vocab = p.integer("--vocab", args.vocab, lo=2)
        # The header stores the vocabulary as a uint32, so 2**32 itself does not fit.
        if vocab > 2**32 - 1:
            p.add("--vocab", f"{vocab} exceeds the header's uint32 vocab field (max {2**32 - 1})")
        seed = p.integer("--seed", args.seed, lo=0)
        if not args.prefix or "/" in args.prefix or any(ord(c) < 0x20 for c in args.prefix):
            p.add("--prefix", f"{args.prefix!r} must be a non-empty file name without '/' or control characters")
        out = Path(args.out)
        if "\x00" in args.out:
            p.add("--out", f"{args.out!r} contains a NUL byte")
        elif out.exists() and not out.is_dir():
            p.add("--out", f"{out} exists and is not a directory")
        p.exit_if_any()
        paths = write_synthetic(
            out=out, shards=shards, tokens_per_shard=tps, vocab=vocab, seed=seed, prefix=args.prefix
        )
        print(f"wrote {len(paths)} shards x {tps} tokens (vocab {vocab}) to {out}")
        return 0

    seq_len = None if args.seq_len is None else p.integer("--seq-len", args.seq_len, lo=1)
    max_vocab = None if args.vocab is None else p.integer("--vocab", args.vocab, lo=1)
    p.exit_if_any()
    found, problems = check_shards(args.glob, seq_len=seq_len, vocab_size=max_vocab, flag="glob")
    p.extend(problems)
    p.exit_if_any()
    total = sum(s.n_tokens for s in found)
    dtypes = sorted({DTYPE_NAMES[s.dtype_code] for s in found})
    print(f"{len(found)} shards, {total} tokens, dtype {'/'.join(dtypes)}, vocab <= {max(s.vocab_size for s in found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
