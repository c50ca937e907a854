package ggufgen

// The shapes of real models, as their published GGUF files declare them,
// for ShapeOnly files: a header reader sees the model's real shape and
// parameter count, and the weights take no disk. Two-dimensional tensors are
// Q4_K (general.file_type 15, Q4_K_M), close to the size of the Q4_K_M files
// people download.

// Llama8B is Llama-3.1-8B: 32 layers 4096 wide, 32 heads sharing 8 KV heads
// of 128, trained for 131072 tokens, 128256 tokens of vocabulary; about 8.03
// billion parameters.
func Llama8B() Spec {
	return Spec{
		Name: "Meta Llama 3.1 8B Instruct", Architecture: "llama",
		ContextLength: 131072, EmbeddingLength: 4096, BlockCount: 32, FeedForwardLength: 14336,
		HeadCount: 32, HeadCountKV: 8, VocabSize: 128256,
		TensorType: Q4_K, ShapeOnly: true,
	}
}

// Llama70B is Llama-3.1-70B: 80 layers 8192 wide, 64 heads sharing 8 KV
// heads; about 70.6 billion parameters.
func Llama70B() Spec {
	return Spec{
		Name: "Meta Llama 3.1 70B Instruct", Architecture: "llama",
		ContextLength: 131072, EmbeddingLength: 8192, BlockCount: 80, FeedForwardLength: 28672,
		HeadCount: 64, HeadCountKV: 8, VocabSize: 128256,
		TensorType: Q4_K, ShapeOnly: true,
	}
}

// Qwen7B is Qwen2.5-7B-Instruct: 28 layers 3584 wide, 28 heads sharing 4 KV
// heads of 128, trained for 32768 tokens, 152064 tokens of vocabulary, with
// biases on its query, key and value; about 7.62 billion parameters.
func Qwen7B() Spec {
	return Spec{
		Name: "Qwen2.5 7B Instruct", Architecture: "qwen2",
		ContextLength: 32768, EmbeddingLength: 3584, BlockCount: 28, FeedForwardLength: 18944,
		HeadCount: 28, HeadCountKV: 4, VocabSize: 152064,
		TensorType: Q4_K, ShapeOnly: true,
	}
}

// Mistral7B is Mistral-7B-Instruct-v0.3, which llama.cpp runs as a llama
// model: 32 layers 4096 wide, 32 heads sharing 8 KV heads, trained for 32768
// tokens, 32768 tokens of vocabulary; about 7.25 billion parameters.
func Mistral7B() Spec {
	return Spec{
		Name: "Mistral 7B Instruct v0.3", Architecture: "llama",
		ContextLength: 32768, EmbeddingLength: 4096, BlockCount: 32, FeedForwardLength: 14336,
		HeadCount: 32, HeadCountKV: 8, VocabSize: 32768,
		TensorType: Q4_K, ShapeOnly: true,
	}
}
