"""Pure renderers: spec -> config.pbtxt and Kubernetes objects; the CRD as YAML."""
