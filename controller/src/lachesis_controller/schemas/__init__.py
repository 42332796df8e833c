"""Request and response bodies of the REST API, one module per resource (the routers in
`api/` import from here). Match, detour and classifier are the bus models themselves
(`bus.messages`), so what the API accepts is exactly what can be shipped to an agent.
Request bodies derive from `base.RequestModel` (strict, no unknown fields)."""
