"""The policy model: loading (embedded or Hugging Face), tokenizer, sampling with a KV cache, log-probs."""
