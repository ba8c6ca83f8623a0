"""The Kafka door: the listener, its connections, SASL authentication and the served APIs."""
