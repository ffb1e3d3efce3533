"""What one training iteration computes and stores (no time here)."""
