"""The InferenceService API: spec and status models, validation, CRD generation."""
