"""Publish: the dataset export (Hugging Face layout), secret scrubbing, and the push to the Hub."""
