"""Clients of the five services (in process or over gRPC) and the replicas that own each adapter."""
