"""Layer 3: mining failures into strategies, their lifecycle, trials and injection."""
