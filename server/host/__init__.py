"""Host tuning: what the engines' processes need from this machine (threads, allocator).

It returns environment variables; ``app.serve`` applies them before any engine starts.
"""
