"""Restaurants and their orders: placing one (the order and its delayed cancellation run
commit together), accepting or rejecting it, and the two cancellation jobs
(``cancel-stale-order`` per order, ``cancel-stale-orders`` the safety net). It imports the
engine (``scheduling``) and the core (``tiffin``); its admin reads ``payouts.selectors``
inside a function, the one way back (payouts depend on orders)."""
