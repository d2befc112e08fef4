"""The settings: each declared once (settings), every ``auto`` decided once for the device (resolve)."""
