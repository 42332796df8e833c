"""Flash wear and embodied carbon per device and tenant, from measured bytes (issue: the
sustainability view). `model.py` is the arithmetic and its sources, `measure.py` turns
telemetry into byte counts over a window, `service.py` puts them together for
`api/sustainability.py`. Operator documentation: docs/sustainability.md."""
