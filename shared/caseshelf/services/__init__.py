"""Use cases. Each receives its ports as parameters; none imports an adapter."""
