"""What the poller does with each GPU's sample: derive the readings, smooth them across polls, add up
the time totals and split them fairly among the GPU's holders."""
