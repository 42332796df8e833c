//! The key-value front end of a Lachesis agent: the memcached protocol (text and meta
//! commands) in front of per-tenant flash caches.
