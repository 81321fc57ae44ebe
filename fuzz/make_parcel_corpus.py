"""Seeds for the `parcel` fuzz target, built by tests/parcelpkt.py (independent of the Rust
code): valid IPv4 and IPv6 parcels, each malformed kind, and truncations.
Run from this folder: python3 make_parcel_corpus.py (the output is committed)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from parcelpkt import parcel4, parcel6  # noqa: E402

S, D, S6, D6 = "198.18.6.1", "198.18.6.2", "2001:db8::1", "2001:db8::2"
segs = [bytes([i]) * 40 for i in range(4)]
seeds = [
    parcel4(S, D, 45080, 25113, segs),
    parcel4(S, D, 45080, 25113, segs[:3] + [b"\x07" * 13]),
    parcel4(S, D, 1, 2, segs, quirk=False),
    parcel4(S, D, 1, 2, segs, nsegs=0),
    parcel4(S, D, 1, 2, segs, jumbo=40),
    parcel4(S, D, 1, 2, segs, udp_len_field=8),
    parcel4(S, D, 1, 2, segs, nsegs=6),
    parcel6(S6, D6, 7, 8, segs),
    parcel6(S6, D6, 7, 8, segs[:2] + [b"z" * 3]),
]
seeds += [s[:len(s) - 17] for s in seeds[:2]] + [seeds[0][:60], seeds[7][:70]]
out = Path(__file__).resolve().parent / "corpus" / "parcel"
out.mkdir(parents=True, exist_ok=True)
for i, s in enumerate(seeds):
    (out / f"seed-{i:03}").write_bytes(s)
print(len(seeds), "seeds in", out)
