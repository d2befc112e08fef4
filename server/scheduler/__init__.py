"""One model's pipeline: what is admitted, when it is tokenized, how rows become batches, which replica runs them."""
