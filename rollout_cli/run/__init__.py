"""The converting process: what a worker runs (`stages`), what it is handed and returns
(`tasks`), the scheduler that plans parts and commits (`convert`), and the engines that run
stages inline, in a process pool or on Ray."""
