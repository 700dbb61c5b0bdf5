"""The InferenceService API: spec and status models (with who owns which status field),
the names every layer shares, validation, CRD generation, and the JSON merge patch
every write is made of. Imports nothing else from tritonscale."""
