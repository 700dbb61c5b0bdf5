"""Level-based reconciliation: compare desired children with live ones, converge them,
and write the reconciler's status fields."""
