//! Lachesis FUSE sSwitch data path (issue 9).
