"""Cross-layer equalization (placeholder until implemented)."""
