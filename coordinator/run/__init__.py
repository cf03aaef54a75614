"""The run: the step and its phases, the journal that makes each phase happen once, the queue and workers."""
