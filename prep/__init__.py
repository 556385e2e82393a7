"""hs-prep: offline AoH head preparation of Hugging Face checkpoints."""
