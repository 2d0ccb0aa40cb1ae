// Hold a dlockd lock from Go with go-redis v9: go run lock.go KEY STEPS
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	key := os.Args[1]
	steps, _ := strconv.Atoi(os.Args[2])
	port := os.Getenv("DLOCK_PORT")
	if port == "" {
		port = "7480"
	}
	ctx := context.Background()
	// One connection is one session: a client of one connection, no read
	// timeout (a LOCK with WAIT is answered up to that long later), no retry.
	rdb := redis.NewClient(&redis.Options{
		Addr:        "localhost:" + port,
		PoolSize:    1,
		ReadTimeout: -1,
		MaxRetries:  -1,
	})
	defer rdb.Close()
	conn := rdb.Conn() // dedicated: never swapped for another pooled connection
	defer conn.Close()

	reply, err := conn.Do(ctx, "LOCK", key, "TTL", 10000, "WAIT", 5000).Slice()
	if errors.Is(err, redis.Nil) {
		fmt.Println("not granted")
		os.Exit(75)
	} else if err != nil {
		// an error reply (-BACKEND: the backend is down; -ERR: a bad
		// argument), or no connection
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fence := reply[1].(int64)
	fmt.Printf("got %s fence %d\n", key, fence)
	for step := 0; step < steps; step++ {
		// -LOST key fence reason once the lock is lost; any error on this
		// connection (LOST, or it closed) means every lock of it is gone
		if err := conn.Do(ctx, "PING").Err(); err != nil {
			fmt.Printf("lost %s: %v\n", key, err)
			os.Exit(3)
		}
		time.Sleep(500 * time.Millisecond) // one step's work, fenced with fence
	}
	if err := conn.Do(ctx, "UNLOCK", key).Err(); err != nil {
		fmt.Printf("lost %s: %v\n", key, err)
		os.Exit(3)
	}
	fmt.Println("done")
}
