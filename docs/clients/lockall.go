// Hold two dlockd locks at once from Go with go-redis v9: go run lockall.go KEY1 KEY2 STEPS
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
	keys := os.Args[1:3]
	steps, _ := strconv.Atoi(os.Args[3])
	port := os.Getenv("DLOCK_PORT")
	if port == "" {
		port = "7480"
	}
	ctx := context.Background()
	// One connection is one session: a client of one connection, no read
	// timeout (a LOCKALL with WAIT is answered up to that long later), no retry.
	rdb := redis.NewClient(&redis.Options{
		Addr:        "localhost:" + port,
		PoolSize:    1,
		ReadTimeout: -1,
		MaxRetries:  -1,
	})
	defer rdb.Close()
	conn := rdb.Conn() // dedicated: never swapped for another pooled connection
	defer conn.Close()

	// LOCKALL numkeys key... TTL WAIT, and UNLOCKALL numkeys key...
	lockall := []interface{}{"LOCKALL", len(keys)}
	unlockall := []interface{}{"UNLOCKALL", len(keys)}
	for _, key := range keys {
		lockall = append(lockall, key)
		unlockall = append(unlockall, key)
	}
	lockall = append(lockall, "TTL", 10000, "WAIT", 5000)

	// both keys or neither, in an order of dlockd's own: no deadlock
	reply, err := conn.Do(ctx, lockall...).Slice()
	if errors.Is(err, redis.Nil) {
		fmt.Println("not granted") // nothing of the set is held
		os.Exit(75)
	} else if err != nil {
		// an error reply (-BACKEND: the backend is down; -ERR: a key named
		// twice), or no connection
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fences := make([]int64, len(keys)) // in the order of keys
	fmt.Print("got ")
	for i, grant := range reply {
		fences[i] = grant.([]interface{})[1].(int64)
		if i > 0 {
			fmt.Print(", ")
		}
		fmt.Printf("%s fence %d", keys[i], fences[i])
	}
	fmt.Println()
	for step := 0; step < steps; step++ {
		// -LOST key fence reason once either lock is lost; any error on this
		// connection (LOST, or it closed) means stop
		if err := conn.Do(ctx, "PING").Err(); err != nil {
			fmt.Println("lost:", err)
			os.Exit(3)
		}
		time.Sleep(500 * time.Millisecond) // one step's work: each resource gets its fence
	}
	if err := conn.Do(ctx, unlockall...).Err(); err != nil {
		fmt.Println("lost:", err)
		os.Exit(3)
	}
	fmt.Println("done")
}
