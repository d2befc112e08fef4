"""The inference stage: engines that turn token ids into pooled vectors (``base.Backend``)."""
