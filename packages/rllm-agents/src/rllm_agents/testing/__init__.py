"""Real test doubles that other packages' tests and benchmarks share (a misbehaving server)."""
