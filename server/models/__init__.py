"""Where a served model comes from and what it is (source), and generated test models (synthetic)."""
