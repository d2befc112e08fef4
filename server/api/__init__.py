"""The service's face: gRPC in and out, request decoding, who may call, and the event loop's lag."""
