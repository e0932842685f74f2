"""Development tools kept out of the wheel: the embedded test broker (Tansu)."""
