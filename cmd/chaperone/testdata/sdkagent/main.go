// Command sdkagent is the "agent" of the end-to-end tests that speak LLM
// APIs: it sends one prompt with the official Anthropic or OpenAI Go SDK,
// streamed, and prints the text of the answer and the tools it asked for.
// It goes wherever its environment says (HTTPS_PROXY, SSL_CERT_FILE), as
// any agent would. With TOOL_COMMAND, it then runs each tool the answer
// asked for as an agent runs its shell tool: sh -c TOOL_COMMAND, a child of
// its own, its output on stderr.
//
//	sdkagent anthropic|openai BASE_URL PROMPT [TOOL_COMMAND]
//	sdkagent responses-ws WSS_URL PROMPT   (ws.go)
//	sdkagent ws-say WSS_URL MESSAGE...     (ws.go)
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go"
	openaioption "github.com/openai/openai-go/option"
)

func main() {
	if len(os.Args) < 4 || len(os.Args) > 5 && os.Args[1] != "ws-say" {
		fmt.Fprintln(os.Stderr, "usage: sdkagent anthropic|openai BASE_URL PROMPT [TOOL_COMMAND]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "anthropic":
		var tools int
		if tools, err = askAnthropic(os.Args[2], os.Args[3]); err == nil && len(os.Args) == 5 {
			for range tools {
				cmd := exec.Command("sh", "-c", os.Args[4])
				cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
				if err = cmd.Run(); err != nil {
					break
				}
			}
		}
	case "openai":
		err = askOpenAI(os.Args[2], os.Args[3])
	case "responses-ws":
		err = askResponsesWS(os.Args[2], os.Args[3])
	case "ws-say":
		err = sayWS(os.Args[2], os.Args[3:])
	default:
		err = fmt.Errorf("unknown provider %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdkagent:", err)
		os.Exit(1)
	}
}

// askAnthropic asks and returns how many tools the answer asked for.
func askAnthropic(base, prompt string) (tools int, err error) {
	c := anthropic.NewClient(anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey("test-key"), anthropicoption.WithMaxRetries(0))
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-e2e",
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name: "bash", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]string{"type": "string"}}},
		}}},
	})
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			return 0, err
		}
	}
	if err := stream.Err(); err != nil {
		return 0, err
	}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			fmt.Println("text:", b.Text)
		case "tool_use":
			fmt.Printf("tool: %s %s\n", b.Name, strings.TrimSpace(string(b.Input)))
			tools++
		}
	}
	fmt.Printf("usage: in=%d out=%d stop=%s\n", msg.Usage.InputTokens, msg.Usage.OutputTokens, msg.StopReason)
	return tools, nil
}

func askOpenAI(base, prompt string) error {
	c := openai.NewClient(openaioption.WithBaseURL(base), openaioption.WithAPIKey("test-key"), openaioption.WithMaxRetries(0))
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-e2e",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if len(acc.Choices) == 0 {
		return fmt.Errorf("no choices in the answer")
	}
	fmt.Println("text:", acc.Choices[0].Message.Content)
	fmt.Printf("usage: in=%d out=%d stop=%s\n", acc.Usage.PromptTokens, acc.Usage.CompletionTokens, acc.Choices[0].FinishReason)
	return nil
}
