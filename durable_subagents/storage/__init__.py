"""Where a task's bytes live: blob stores (local and S3), the transcript chain, sealing."""
