//! Lachesis flash cache engines (issue 6).
