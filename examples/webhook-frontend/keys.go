package main

// Every Valkey key this example writes is formatted here. The queues' own
// keys belong to the pidispatch packages; this is the front-end's only one.

// deliveryKey remembers a forge delivery id for replayWindow, so a replayed
// (or re-sent) delivery is refused before it reaches the queue.
func deliveryKey(delivery string) string { return "webhook:delivery:" + delivery }
