"""How the admin writes dates and instants (settings.FORMAT_MODULE_PATH)."""
