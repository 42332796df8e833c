"""REST API under /api/v1 (one module per resource) plus the unversioned health routes."""
