"""The bundled model server: SmolLM2-135M through llama.cpp (the xllamacpp wheel), behind Ollama's HTTP API.

It runs in a process of its own (``python -m modelserver``), so a crash of the
native library never takes a web server or a worker with it; the app reaches it
through the official ``ollama`` client, as it reaches a real Ollama. This
package does not import Django or the app: it depends on xllamacpp and
the standard library only.
"""
