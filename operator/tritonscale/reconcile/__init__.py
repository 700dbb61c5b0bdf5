"""Level-based reconciliation: compare desired children with live ones."""
