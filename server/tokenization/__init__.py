"""The tokenizer stage: texts to token ids off the event loop (``pool.TokenizerPool``)."""
