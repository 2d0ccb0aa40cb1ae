// Lead a dlockd election from Go with go-redis v9: go run elect.go KEY VALUE STEPS
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	key, value := os.Args[1], os.Args[2]
	steps, _ := strconv.Atoi(os.Args[3])
	port := os.Getenv("DLOCK_PORT")
	if port == "" {
		port = "7480"
	}
	ctx := context.Background()
	// One connection is one session, and the session is the candidacy: a
	// client of one connection, no read timeout (CAMPAIGN without WAIT is
	// answered when elected), no retry.
	rdb := redis.NewClient(&redis.Options{
		Addr:        "localhost:" + port,
		PoolSize:    1,
		ReadTimeout: -1,
		MaxRetries:  -1,
	})
	defer rdb.Close()
	conn := rdb.Conn() // dedicated: never swapped for another pooled connection
	defer conn.Close()

	reply, err := conn.Do(ctx, "CAMPAIGN", key, value, "TTL", 30000).Slice()
	if err != nil {
		// an error reply (-BACKEND, -ERR), or the connection failed or closed
		fmt.Println("error:", err)
		os.Exit(1)
	}
	term := reply[1].(int64)
	fmt.Printf("leader %s term %d\n", key, term)
	for step := 0; step < steps; step++ {
		// -LOST key term reason once the term is lost; any error on this
		// connection (LOST, or it closed) means the term is over, and another
		// candidate may lead already: step down, no more work with this term
		if err := conn.Do(ctx, "PING").Err(); err != nil {
			fmt.Printf("lost %s: %v\n", key, err)
			os.Exit(3)
		}
		time.Sleep(time.Second) // one step's work, fenced with term
	}
	if err := conn.Do(ctx, "RESIGN", key).Err(); err != nil {
		fmt.Printf("lost %s: %v\n", key, err)
		os.Exit(3)
	}
	fmt.Println("done")
}
