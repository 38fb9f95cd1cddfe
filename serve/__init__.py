"""serve package: an HTTP completion server (OpenAI and llama.cpp APIs) over one checkpoint."""
