"""Proving that an artifact computes what PyTorch computes: the feeds every runtime gets (feeds:
seeded pixels and real images), the PyTorch reference that is the centre of every comparison
(reference), tolerances and the comparison itself (parity), the checks every artifact goes through
(checks), and the gate against an earlier verification (baseline).

May import: core, models. Backends are handed in by the caller (the spec is above this room: its
hooks speak this room's vocabulary of feeds, tolerances and findings)."""
