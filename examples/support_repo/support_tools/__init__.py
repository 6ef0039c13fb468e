"""Python tools of the support-desk example repository."""
