"""Docker sandboxes that run one real agent CLI per factory session."""
