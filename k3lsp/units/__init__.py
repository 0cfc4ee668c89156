"""C and C++ text split into units (functions with their context), in a child process off the event loop."""
