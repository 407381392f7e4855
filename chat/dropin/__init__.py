"""The drop-in endpoints for Ollama and OpenAI clients: what both share (common) and each wire format."""
