"""Pure renderers: spec -> config.pbtxt and Kubernetes objects."""
