"""mediaref."""
