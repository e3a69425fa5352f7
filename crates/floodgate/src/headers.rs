//! Rate-limit headers and 429 bodies, shared by every front door.
